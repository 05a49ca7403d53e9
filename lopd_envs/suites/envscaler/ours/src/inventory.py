from typing import Dict, List, TypedDict


class ItemInfo(TypedDict):
    name: str
    quantity: int
    reorder_level: int
    location: str


class OrderInfo(TypedDict):
    sku: str
    quantity: int
    status: str  # "pending", "fulfilled" or "cancelled"


class WarehouseInventory:
    def __init__(self, init_config: dict):
        """
        A warehouse stock system (lopd's own environment, EnvScaler format).
        """
        # Items: {sku: ItemInfo}
        self.items: Dict[str, ItemInfo] = {}
        # Customer orders: {order_id: OrderInfo}
        self.orders: Dict[str, OrderInfo] = {}
        # Restock requests: [{"sku": str, "quantity": int}]
        self.restock_requests: List[dict] = []
        # Locations items may be stored at
        self.valid_locations: List[str] = []
        # Stock adjustments with their reasons
        self.adjustments: List[dict] = []
        self.init_config = init_config

    def get_item(self, sku: str) -> dict:
        """
        Look up one item by SKU.
        """
        item = self.items.get(sku)
        if item is None:
            return {"success": False, "error": f"SKU {sku} not found"}
        return {"success": True, "data": dict(item)}

    def search_items(self, name_contains: str) -> dict:
        """
        Find items whose name contains the text (case-insensitive).

        Returns:
            dict: {"success": True, "data": {sku: ItemInfo}}
        """
        text = name_contains.lower()
        return {"success": True, "data": {s: dict(i) for s, i in self.items.items() if text in i["name"].lower()}}

    def get_order(self, order_id: str) -> dict:
        """
        Look up one customer order.
        """
        order = self.orders.get(order_id)
        if order is None:
            return {"success": False, "error": f"Order {order_id} not found"}
        return {"success": True, "data": dict(order)}

    def adjust_stock(self, sku: str, delta: int, reason: str) -> dict:
        """
        Add (positive delta) or remove (negative delta) stock, with a reason.

        Constraints:
            - Stock can never become negative.
            - A reason is required.
        """
        item = self.items.get(sku)
        if item is None:
            return {"success": False, "error": f"SKU {sku} not found"}
        if not isinstance(delta, int) or delta == 0:
            return {"success": False, "error": "delta must be a non-zero integer"}
        if not reason:
            return {"success": False, "error": "A reason is required"}
        if item["quantity"] + delta < 0:
            return {"success": False, "error": "Stock cannot become negative"}
        item["quantity"] += delta
        self.adjustments.append({"sku": sku, "delta": delta, "reason": reason})
        return {"success": True, "message": f"{sku} quantity is now {item['quantity']}"}

    def create_restock_request(self, sku: str, quantity: int) -> dict:
        """
        Request a restock from the supplier.

        Constraints:
            - Allowed only when the item's quantity is at or below its reorder_level.
            - quantity must be a positive integer; one open request per SKU.
        """
        item = self.items.get(sku)
        if item is None:
            return {"success": False, "error": f"SKU {sku} not found"}
        if not isinstance(quantity, int) or quantity <= 0:
            return {"success": False, "error": "quantity must be a positive integer"}
        if item["quantity"] > item["reorder_level"]:
            return {"success": False, "error": "Stock is above the reorder level; no restock allowed"}
        if any(r["sku"] == sku for r in self.restock_requests):
            return {"success": False, "error": f"A restock request for {sku} already exists"}
        self.restock_requests.append({"sku": sku, "quantity": quantity})
        return {"success": True, "message": f"Restock of {quantity} requested for {sku}"}

    def fulfill_order(self, order_id: str) -> dict:
        """
        Ship a pending order, removing its quantity from stock.

        Constraints:
            - Only pending orders; stock must cover the whole order.
        """
        order = self.orders.get(order_id)
        if order is None:
            return {"success": False, "error": f"Order {order_id} not found"}
        if order["status"] != "pending":
            return {"success": False, "error": f"Order {order_id} is {order['status']}"}
        item = self.items[order["sku"]]
        if item["quantity"] < order["quantity"]:
            return {"success": False, "error": "Not enough stock to fulfill the order"}
        item["quantity"] -= order["quantity"]
        order["status"] = "fulfilled"
        return {"success": True, "message": f"Order {order_id} fulfilled"}

    def cancel_order(self, order_id: str) -> dict:
        """
        Cancel a pending order.
        """
        order = self.orders.get(order_id)
        if order is None:
            return {"success": False, "error": f"Order {order_id} not found"}
        if order["status"] != "pending":
            return {"success": False, "error": f"Order {order_id} is {order['status']}"}
        order["status"] = "cancelled"
        return {"success": True, "message": f"Order {order_id} cancelled"}

    def move_item(self, sku: str, location: str) -> dict:
        """
        Move an item to another storage location (must be one of valid_locations).
        """
        item = self.items.get(sku)
        if item is None:
            return {"success": False, "error": f"SKU {sku} not found"}
        if location not in self.valid_locations:
            return {"success": False, "error": f"Unknown location {location}"}
        item["location"] = location
        return {"success": True, "message": f"{sku} moved to {location}"}
