"""event fiesta factory: pure task creation and scheduling, no sleeps.

M events split equally between three kinds (user signup, order placement,
data processing), one task per event, all gathered. Handlers take
module-level asyncio.Locks, update dicts, and spawn 1-2 fire-and-forget
tasks kept alive in a set with add_done_callback(discard).
"""
import asyncio
import random

from . import SEED

# Module-level state, rebuilt by reset() at the start of every run: a Lock
# created at import time could end up bound to another (closed) loop.
users_lock = orders_lock = inventory_lock = data_lock = stats_lock = None
users = orders = inventory = processed = stats = None
background = None


def reset():
    global users_lock, orders_lock, inventory_lock, data_lock, stats_lock
    global users, orders, inventory, processed, stats, background
    users_lock = asyncio.Lock()
    orders_lock = asyncio.Lock()
    inventory_lock = asyncio.Lock()
    data_lock = asyncio.Lock()
    stats_lock = asyncio.Lock()
    users, orders, processed = {}, {}, {}
    inventory = {f"sku-{n}": 10**9 for n in range(16)}
    stats = {"emails": 0, "profiles": 0, "confirmations": 0,
             "shipments": 0, "reports": 0, "archives": 0}
    background = set()


def fire_and_forget(coro):
    task = asyncio.get_running_loop().create_task(coro)
    background.add(task)
    task.add_done_callback(background.discard)


async def bump(counter):
    async with stats_lock:
        stats[counter] += 1


async def user_signup(uid, extra):
    async with users_lock:
        users[uid] = {"name": f"user-{uid}", "active": True}
    fire_and_forget(bump("emails"))
    if extra:
        fire_and_forget(bump("profiles"))


async def order_placement(oid, extra):
    sku = f"sku-{oid % 16}"
    async with orders_lock:
        orders[oid] = {"sku": sku, "status": "placed"}
    async with inventory_lock:
        inventory[sku] -= 1
    fire_and_forget(bump("confirmations"))
    if extra:
        fire_and_forget(bump("shipments"))


async def data_processing(did, extra):
    value = sum(range(did % 32))
    async with data_lock:
        processed[did] = value
    fire_and_forget(bump("reports"))
    if extra:
        fire_and_forget(bump("archives"))


HANDLERS = (user_signup, order_placement, data_processing)


async def main(M):
    reset()
    rng = random.Random(SEED)
    # Event i has kind i % 3; "extra" decides whether it spawns a second task.
    extras = [rng.random() < 0.5 for _ in range(M)]
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(HANDLERS[i % 3](i, extras[i])) for i in range(M)]
    await asyncio.gather(*tasks)
    while background:
        await asyncio.gather(*list(background))
    return {
        "events": M,
        "users": len(users),
        "orders": len(orders),
        "processed": len(processed),
        "background_done": sum(stats.values()),
        "background_expected": M + sum(extras),
    }
