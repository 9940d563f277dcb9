"""The compressed-echo message: a 4 KiB JSON document shaped like an API response (a
page of user records), the same bytes on every run. Written once to the temp directory
for `ws-load --payload`."""
import json
import os
import random
import tempfile

SIZE = 4096
WORDS = ("alpha", "bravo", "delta", "echo", "gamma", "kilo", "lima", "omega", "sierra", "tango")


def document(size=SIZE):
    """A JSON text of exactly `size` bytes (ASCII)."""
    rng = random.Random(4096)
    records, text = [], ""
    while True:
        n = len(records)
        records.append({
            "id": 100000 + n * 7,
            "name": f"{rng.choice(WORDS).title()} {rng.choice(WORDS).title()}",
            "email": f"user{n}@example.org",
            "active": rng.random() < 0.8,
            "score": round(rng.uniform(0, 100), 2),
            "tags": rng.sample(WORDS, 3),
            "created": f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T12:{rng.randint(0, 59):02d}:00Z",
        })
        candidate = json.dumps({"page": 1, "per_page": len(records), "users": records, "note": ""},
                               separators=(",", ":"))
        if len(candidate) > size:
            break
        text = candidate
    # Pad the note so the document is exactly `size` bytes.
    return text.replace('"note":""', '"note":"' + "." * (size - len(text)) + '"')


def path(size=SIZE):
    """The document's file (made on first use)."""
    target = os.path.join(tempfile.gettempdir(), f"swordfish-ws-doc-{size}.json")
    body = document(size).encode()
    if not os.path.exists(target) or os.path.getsize(target) != len(body):
        with open(target, "wb") as f:
            f.write(body)
    return target
