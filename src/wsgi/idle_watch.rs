//! The WSGI pool's idle watcher: a thread in the kernel's idle scheduling class
//! (`SCHED_IDLE`), which runs only when its CPU has nothing else to run. If requests are
//! queued then, every thread serving is blocked (an app waiting on its database) and none
//! was woken for them because the process looked busy: one more thread is woken, and the
//! CPU serves instead of idling. A look at the process's CPU use would come too late or
//! too often; the kernel knows the moment exactly. It costs nothing while the CPU is busy.
//! It only wakes idle threads and never starts one: a thread starts in its creator's class,
//! and an unprivileged thread cannot leave the idle class (the pool's own looks start
//! threads).
//!
//! Also the app threads' class. Under load they run as `SCHED_BATCH`: a thread woken (back
//! from a database call, or for a request) does not preempt the running one, which most
//! likely holds the GIL the woken thread would at once wait for; it runs when the running
//! thread blocks or yields. At low load they stay in the normal class, where a thread back
//! from its database call runs at once. And their timers: an app thread's timed waits
//! (`time.sleep`, a timeout) end at their deadline, not up to the kernel's default 50 µs
//! of slack after it, as the loop's own timers do (its timerfd has no slack).
//! docs/design.md has the measurements.

#[cfg(target_os = "linux")]
use super::pool::PoolState;
use super::pool::Shared;
#[cfg(target_os = "linux")]
use crate::sync::{wait_timeout_unpoisoned, wait_unpoisoned};
use std::sync::Arc;
use std::time::Duration;

/// How long the watcher waits before it looks again when the CPUs it may run on are idle
/// but the process keeps one of them busy (the GIL is taken: another thread would queue for
/// it).
const RECHECK: Duration = Duration::from_millis(5);

/// Put the calling thread in scheduling class `policy`; false where that cannot be done.
#[cfg(target_os = "linux")]
pub(crate) fn set_class(policy: libc::c_int) -> bool {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param for the call.
    unsafe { libc::sched_setscheduler(0, policy, &param) == 0 }
}

/// The least timer slack the kernel allows (0 would restore the default): the calling
/// thread's timed waits end at their deadline.
pub(crate) fn exact_timers() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_TIMERSLACK takes one unsigned long and touches only the calling thread.
    unsafe {
        libc::prctl(
            libc::PR_SET_TIMERSLACK,
            1 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        );
    }
}

/// An app thread's scheduling class: batch while the process is loaded, normal otherwise
/// (at low load a thread back from its database call should run at once).
pub(super) struct Class {
    batch: bool,
}

impl Class {
    /// The calling thread's class, set to normal: a thread starts in its creator's class,
    /// and app threads in the batch class start threads too.
    pub(super) fn normal() -> Class {
        #[cfg(target_os = "linux")]
        set_class(libc::SCHED_OTHER);
        Class { batch: false }
    }

    pub(super) fn follow(&mut self, loaded: bool) {
        if loaded == self.batch {
            return;
        }
        self.batch = loaded;
        #[cfg(target_os = "linux")]
        set_class(if loaded { libc::SCHED_BATCH } else { libc::SCHED_OTHER });
    }
}

/// How many CPUs the process may run on.
#[cfg(target_os = "linux")]
fn cpus_allowed() -> u32 {
    // SAFETY: an all-zero cpu_set_t is a valid, empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: sched_getaffinity writes at most `size_of::<cpu_set_t>()` bytes into `set`.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return 0;
    }
    // SAFETY: CPU_COUNT only reads the set sched_getaffinity filled.
    u32::try_from(unsafe { libc::CPU_COUNT(&set) }).unwrap_or(0)
}

/// Start the watcher of `shared`. Where the kernel has no idle class nothing is started:
/// the pool's periodic looks remain.
pub(super) fn start(shared: Arc<Shared>) {
    #[cfg(target_os = "linux")]
    {
        let spawned = std::thread::Builder::new().name("swordfish-wsgi-idle".into()).spawn(move || {
            if set_class(libc::SCHED_IDLE) {
                watch(&shared, cpus_allowed() == 1);
            }
        });
        // Never joined: it ends when the pool stops, and holds no Python object.
        drop(spawned);
    }
    #[cfg(not(target_os = "linux"))]
    drop(shared);
}

/// Runs only when a CPU it may run on is idle. On one CPU that is exactly when every
/// thread of the process is blocked; on several, another CPU may be idle while a thread
/// of this process holds the GIL, so a thread is woken only if the process's CPU use
/// leaves room for one.
#[cfg(target_os = "linux")]
fn watch(shared: &Shared, one_cpu: bool) {
    let mut st = shared.lock();
    loop {
        if st.stopping {
            return;
        }
        if st.uncovered() {
            if one_cpu || !st.cpu_busy() {
                match PoolState::wake_idle(st, |t| t.unpark()) {
                    // The thread woken preempts this one; the next look comes with the
                    // next idle moment.
                    Ok(()) => {
                        st = shared.lock();
                        continue;
                    }
                    Err(g) => st = g,
                }
            } else {
                st = wait_timeout_unpoisoned(&shared.queued, st, RECHECK);
                continue;
            }
        }
        // Woken (`watcher_waiting` taken) when a request is left waiting, or at the stop.
        st.watcher_waiting = true;
        st = wait_unpoisoned(&shared.queued, st);
        st.watcher_waiting = false;
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn policy() -> libc::c_int {
        // SAFETY: pid 0 is the calling thread.
        unsafe { libc::sched_getscheduler(0) }
    }

    /// A thread started by an app thread in the batch class begins there; `Class::normal`
    /// takes it out (allowed without privileges, unlike leaving the idle class).
    #[test]
    fn a_thread_started_from_the_batch_class_is_made_normal() {
        let policies = std::thread::spawn(|| {
            assert!(set_class(libc::SCHED_BATCH));
            std::thread::spawn(|| {
                let inherited = policy();
                let _class = Class::normal();
                (inherited, policy())
            })
            .join()
            .unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(policies, (libc::SCHED_BATCH, libc::SCHED_OTHER));
    }

    #[test]
    fn exact_timers_take_the_slack_away() {
        let slack = || {
            // SAFETY: PR_GET_TIMERSLACK takes no argument and returns the calling thread's.
            unsafe {
                libc::prctl(
                    libc::PR_GET_TIMERSLACK,
                    0 as libc::c_ulong,
                    0 as libc::c_ulong,
                    0 as libc::c_ulong,
                    0 as libc::c_ulong,
                )
            }
        };
        let (before, after) = std::thread::spawn(move || {
            let before = slack();
            exact_timers();
            (before, slack())
        })
        .join()
        .unwrap();
        assert!(before > 1, "the default slack is {before} ns");
        assert_eq!(after, 1);
    }

    #[test]
    fn class_follows_the_load() {
        std::thread::spawn(|| {
            let mut class = Class::normal();
            class.follow(true);
            assert_eq!(policy(), libc::SCHED_BATCH);
            class.follow(false);
            assert_eq!(policy(), libc::SCHED_OTHER);
        })
        .join()
        .unwrap();
    }
}
