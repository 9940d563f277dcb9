"""food delivery: M random events handled by one system with one Lock.

Six event kinds: restaurant open, restaurant closed, new order, assign
rider, order delivered, rider status. The order, assign and deliver handlers
sleep 0.1 s, take the lock, update dicts, then either await a notification
(sleep 0.1 s) or gather a notification and a log write (sleep 0.05 s).
All event coroutines are gathered.
"""
import asyncio
import random

from . import SEED

KINDS = ("restaurant_open", "restaurant_closed", "new_order",
         "assign_rider", "order_delivered", "rider_status")
RESTAURANTS = 64
RIDERS = 256


class DeliverySystem:
    def __init__(self):
        self.lock = asyncio.Lock()
        self.restaurants = {}
        self.orders = {}
        self.riders = {}
        self.notifications = 0
        self.logs = 0

    async def notify(self, who):
        await asyncio.sleep(0.1)
        self.notifications += 1

    async def log(self, line):
        await asyncio.sleep(0.05)
        self.logs += 1

    async def restaurant_open(self, rid):
        async with self.lock:
            self.restaurants[rid] = "open"

    async def restaurant_closed(self, rid):
        async with self.lock:
            self.restaurants[rid] = "closed"

    async def rider_status(self, rider):
        async with self.lock:
            self.riders.setdefault(rider, {"status": "idle", "order": None})

    async def new_order(self, oid, rid):
        await asyncio.sleep(0.1)
        async with self.lock:
            self.orders[oid] = {"restaurant": rid, "status": "placed"}
        await asyncio.gather(self.notify(rid), self.log(f"order {oid}"))

    async def assign_rider(self, oid, rider):
        await asyncio.sleep(0.1)
        async with self.lock:
            self.orders.setdefault(oid, {"status": "placed"})["rider"] = rider
            self.riders[rider] = {"status": "busy", "order": oid}
        await self.notify(rider)

    async def order_delivered(self, oid, rider):
        await asyncio.sleep(0.1)
        async with self.lock:
            self.orders.setdefault(oid, {})["status"] = "delivered"
            self.riders[rider] = {"status": "idle", "order": None}
        await asyncio.gather(self.notify(oid), self.log(f"delivered {oid}"))


def make_events(M):
    """Draw M (kind, args) events from the fixed seed."""
    rng = random.Random(SEED)
    events = []
    for _ in range(M):
        kind = rng.choice(KINDS)
        if kind in ("restaurant_open", "restaurant_closed"):
            args = (rng.randrange(RESTAURANTS),)
        elif kind == "rider_status":
            args = (rng.randrange(RIDERS),)
        elif kind == "new_order":
            args = (rng.randrange(M), rng.randrange(RESTAURANTS))
        else:
            args = (rng.randrange(M), rng.randrange(RIDERS))
        events.append((kind, args))
    return events


async def main(M):
    events = make_events(M)
    system = DeliverySystem()
    await asyncio.gather(*(getattr(system, kind)(*args) for kind, args in events))
    count = {kind: 0 for kind in KINDS}
    for kind, _ in events:
        count[kind] += 1
    return {
        "events": M,
        "notifications": system.notifications,
        "notifications_expected": (count["new_order"] + count["assign_rider"]
                                   + count["order_delivered"]),
        "logs": system.logs,
        "logs_expected": count["new_order"] + count["order_delivered"],
    }
