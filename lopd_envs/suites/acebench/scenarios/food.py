"""The food delivery platform (``FoodPlatform``), written from ACEBench's function docs and behaviour.

Six accounts with balances, six merchants with two products each (names are Chinese in the Chinese
data), a list of logged-in users and an order history. Logging in needs Wi-Fi; ordering needs the user
logged in, a known merchant, known products and positive integer quantities, and enough balance. The
Chinese class refuses an order that would spend the balance exactly (``>=``) where the English one allows
it, and its ``search_orders`` fails on any order whose merchant does not match; both as upstream.
"""

from __future__ import annotations

import copy
from typing import Any

from lopd_envs.suites.acebench.scenarios.base import BaseApi, with_device_text

ACCOUNTS = {
    "Eve": {"user_id": "U100", "password": "password123", "balance": 500.0},
    "Frank": {"user_id": "U101", "password": "password456", "balance": 300.0},
    "Grace": {"user_id": "U102", "password": "password789", "balance": 150.0},
    "Helen": {"user_id": "U103", "password": "password321", "balance": 800.0},
    "Isaac": {"user_id": "U104", "password": "password654", "balance": 400.0},
    "Jack": {"user_id": "U105", "password": "password654", "balance": 120.0},
}

# (merchant id, service type, merchant name per language, [(product per language, price), ...])
_MERCHANTS = [
    ("M100", "Pizza", {"en": "Domino's", "zh": "达美乐"},
     [({"en": "Margherita Pizza", "zh": "玛格丽特披萨"}, 68.0), ({"en": "Super Supreme Pizza", "zh": "超级至尊披萨"}, 88.0)]),
    ("M101", "Bibimbap", {"en": "Rice Village Bibimbap", "zh": "米村拌饭"},
     [({"en": "Stone Pot Bibimbap", "zh": "石锅拌饭"}, 35.0), ({"en": "Korean Beef Bibimbap", "zh": "韩式牛肉拌饭"}, 45.0)]),
    ("M102", "Hotpot", {"en": "Haidilao", "zh": "海底捞"},
     [({"en": "Beef Rolls", "zh": "牛肉卷"}, 68.0), ({"en": "Seafood Platter", "zh": "海鲜拼盘"}, 88.0)]),
    ("M103", "Milk Tea", {"en": "Heytea", "zh": "喜茶"},
     [({"en": "Cheese Milk Tea", "zh": "芝士奶茶"}, 25.0), ({"en": "Four Seasons Spring Milk Tea", "zh": "四季春奶茶"}, 22.0)]),
    ("M104", "Fresh Grocery", {"en": "Hema Fresh", "zh": "盒马生鲜"},
     [({"en": "Organic Vegetable Pack", "zh": "有机蔬菜包"}, 15.0), ({"en": "Fresh Gift Pack", "zh": "生鲜大礼包"}, 99.0)]),
    ("M105", "BBQ", {"en": "Jiutian BBQ", "zh": "九田家烤肉"},
     [({"en": "Korean Grilled Beef", "zh": "韩式烤牛肉"}, 128.0), ({"en": "Grilled Pork Belly", "zh": "烤五花肉"}, 78.0)]),
]


def merchants(language: str) -> dict[str, dict[str, Any]]:
    return {names[language]: {"merchant_id": mid, "service_type": service,
                              "menu": [{"product": product[language], "price": price} for product, price in menu]}
            for mid, service, names, menu in _MERCHANTS}


TEXT = with_device_text({
    "en": {
        "wifi_off": "Wi-Fi is not enabled, unable to login",
        "no_user": "User does not exist",
        "bad_password": "Incorrect password",
        "already": "{username} is already logged in",
        "login_ok": "User {username} has successfully logged in!",
        "nobody": "No users are currently logged in to the food platform",
        "not_logged_in": "User {username} is not logged in to the food platform",
        "no_merchant": "Merchant does not exist",
        "bad_quantity": "Invalid quantity {quantity} for product {product}",
        "no_product": "Product {product} does not exist in {merchant}'s menu",
        "poor": "Insufficient balance to place the order",
        "ordered": "Food delivery order successfully placed with {merchant}. Total amount: {total} yuan",
        "unknown_merchant": "Merchant '{merchant}' does not exist",
        "no_orders": "User has no order records",
        "no_order_match": "No matching orders found",
    },
    "zh": {
        "wifi_off": "wifi未打开，无法登录",
        "no_user": "用户不存在",
        "bad_password": "密码错误",
        "already": "{username} 已经登录",
        "login_ok": "用户{username}登陆成功！",
        "nobody": "当前没有登录food platform",
        "not_logged_in": "用户 {username} 未登录food platform",
        "no_merchant": "商家不存在",
        "bad_quantity": "无效的数量 {quantity} 对于商品 {product}",
        "no_product": "商品 {product} 不存在于 {merchant} 的菜单中",
        "poor": "余额不足，无法下单",
        "ordered": "外卖订单成功下单给 {merchant}，总金额为 {total} 元",
        "unknown_merchant": "商家 '{merchant}' 不存在",
        "no_orders": "用户没有订单记录",
        "no_order_match": "没有找到匹配的订单",
    },
})


class FoodPlatform(BaseApi):
    SAVED = ("users", "logged_in_users", "orders")
    TEXT = TEXT

    def __init__(self, language: str = "en"):
        super().__init__(language)
        self.users = copy.deepcopy(ACCOUNTS)
        self.merchant_list = merchants(language)
        self.logged_in_users: list[str] = []
        self.orders: list[dict[str, Any]] = []

    def _load_scenario(self, config: dict[str, Any]) -> None:
        super()._load_scenario(config)
        self.logged_in_users = config.get("logged_in_users", [])

    def login_food_platform(self, username: str, password: str) -> dict[str, Any]:
        """Log in to the food delivery platform using a username and password."""
        if self.wifi == False:  # noqa: E712
            return self._say(False, "wifi_off")
        if username not in self.users:
            return self._say(False, "no_user")
        if self.users[username]["password"] != password:
            return self._say(False, "bad_password")
        if username in self.logged_in_users:
            return self._say(False, "already", username=username)
        self.logged_in_users.append(username)
        return self._say(True, "login_ok", username=username)

    def view_logged_in_users(self) -> dict[str, Any]:
        """List the users logged in to the platform."""
        if not self.logged_in_users:
            return self._say(False, "nobody")
        return {"status": True, "logged_in_users": self.logged_in_users}

    def check_balance(self, user_name: str) -> float:
        """Check the balance of a specified user (0.0 for an unknown user)."""
        return self.users[user_name]["balance"] if user_name in self.users else 0.0

    def add_food_delivery_order(self, username: str, merchant_name: str, items: list[dict[str, Any]]) -> dict[str, Any]:
        """Place a food delivery order: each item has a product name and a quantity (default 1)."""
        if username not in self.logged_in_users:
            return self._say(False, "not_logged_in", username=username)
        if merchant_name not in self.merchant_list:
            return self._say(False, "no_merchant")
        total, lines = 0.0, []
        for item in items:
            product, quantity = item.get("product"), item.get("quantity", 1)
            if not isinstance(quantity, int) or quantity <= 0:
                return self._say(False, "bad_quantity", quantity=quantity, product=product)
            entry = next((p for p in self.merchant_list[merchant_name]["menu"] if p["product"] == product), None)
            if entry is None:
                return self._say(False, "no_product", product=product, merchant=merchant_name)
            total += entry["price"] * quantity
            lines.append({"product": product, "quantity": quantity, "price_per_unit": entry["price"]})
        balance = self.users[username]["balance"]
        if total > balance or (self._language == "zh" and total == balance):
            return self._say(False, "poor")
        self.users[username]["balance"] -= total
        self.orders.append({"user_name": username, "merchant_name": merchant_name, "items": lines, "total_price": total})
        return self._say(True, "ordered", merchant=merchant_name, total=total)

    def get_products(self, merchant_name: str) -> Any:
        """Get the product list (menu) of a merchant."""
        merchant = self.merchant_list.get(merchant_name)
        if merchant:
            return merchant["menu"]
        return self._say(False, "unknown_merchant", merchant=merchant_name)

    def view_orders(self, user_name: str) -> dict[str, Any]:
        """List a user's orders."""
        found = [order for order in self.orders if order["user_name"] == user_name]
        if not found:
            return self._say(False, "no_orders")
        return {"status": True, "orders": found}

    def search_orders(self, keyword: str) -> dict[str, Any]:
        """Find orders whose merchant or product names contain a keyword."""
        word = keyword.lower()

        def product_matches(order: dict[str, Any]) -> bool:
            if self._language == "zh":  # upstream lower-cases the item dicts themselves: AttributeError
                return any(word in item.lower() for item in order.get("items", []))
            return any(word in item["product"].lower() for item in order.get("items", []))

        found = [order for order in self.orders if word in order["merchant_name"].lower() or product_matches(order)]
        if not found:
            return self._say(False, "no_order_match")
        return {"status": True, "orders": found}
