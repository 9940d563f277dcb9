"""What the report's two apps share: the page's data, the template directory and the fake
database (its latency from REPORT_DB_LATENCY_MS, default 0, and the row it returns)."""
import os

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
LATENCY = float(os.environ.get("REPORT_DB_LATENCY_MS", "0")) / 1000
TITLE = "Shop"
PRODUCTS = [{"id": i, "name": f"product {i}", "price": round(2.5 * i + 0.99, 2), "in_stock": i % 3 != 0}
            for i in range(1, 11)]
ROW = {"id": 42, "name": "product 42", "price": 105.99, "in_stock": True}
