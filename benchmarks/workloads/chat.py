"""chat: M users log in, send 2-5 messages each, and log out.

Login and logout take the room lock. Each message is: sleep 0.1 s, then a
broadcast that sleeps uniform(0.05, 0.1) s and appends to the room history
under the lock. After its messages a user sleeps 0.3 s before logging out.
"""
import asyncio
import random

from . import SEED


class ChatRoom:
    def __init__(self):
        self.lock = asyncio.Lock()
        self.online = set()
        self.history = []
        self.logins = 0
        self.logouts = 0

    async def login(self, uid):
        async with self.lock:
            self.online.add(uid)
            self.logins += 1

    async def logout(self, uid):
        async with self.lock:
            self.online.discard(uid)
            self.logouts += 1

    async def broadcast(self, uid, text, delay):
        await asyncio.sleep(delay)
        async with self.lock:
            self.history.append((uid, text))


async def user(room, uid, delays):
    await room.login(uid)
    for n, delay in enumerate(delays):
        await asyncio.sleep(0.1)
        await room.broadcast(uid, f"message {n} from user {uid}", delay)
    await asyncio.sleep(0.3)
    await room.logout(uid)


async def main(M):
    rng = random.Random(SEED)
    # plans[uid] = broadcast delays of that user's messages (2 to 5 of them).
    plans = [[rng.uniform(0.05, 0.1) for _ in range(rng.randint(2, 5))]
             for _ in range(M)]
    room = ChatRoom()
    await asyncio.gather(*(user(room, uid, plans[uid]) for uid in range(M)))
    return {
        "users": M,
        "logins": room.logins,
        "logouts": room.logouts,
        "still_online": len(room.online),
        "sent": sum(len(p) for p in plans),
        "delivered": len(room.history),
    }
