"""Scheduling workloads: each module exposes ``async def main(M)``.

Every ``main`` returns a dict of counts so check_workloads.py can verify the
work was really done; the runner only times it. All randomness is drawn up
front from a fixed seed so every event loop gets exactly the same work,
whatever order its scheduler runs the tasks in.
"""

# Module name -> name used in tables, plot file names and --workloads.
WORKLOADS = {
    "producer_consumer": "producer-consumer",
    "task_workflow": "task-workflow",
    "event_fiesta": "event-fiesta-factory",
    "chat": "chat",
    "food_delivery": "food-delivery",
}

SEED = 20240607
