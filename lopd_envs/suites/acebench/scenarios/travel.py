"""The airline booking system (``Travel``), written from ACEBench's function docs and behaviour.

Three users (``user1``-``user3``) with cash and bank balances and a membership level, eleven flights and
four reservations. The clock is fixed (cancellation compares against 2024-07-14 06:00). The official
behaviour is kept where it is surprising, because end states are compared with the official gold:

* ``reserve_flight`` never reports "authentication failed" (the failed-login dict is truthy); a wrong
  password fails later with a ``KeyError``, an unknown flight with a ``TypeError``;
* new reservations are numbered ``res_<count + 1>`` and carry no origin/destination;
* ``cancel_reservation`` refunds to the cash balance but keeps the reservation; an airline cancellation
  is recognised only by the exact reason text;
* ``modify_flight`` changes the cabin even when the balance cannot pay the difference.

Cities and cabin names are Chinese in the Chinese data (``经济舱``/``商务舱``).
"""

from __future__ import annotations

import copy
from datetime import datetime, timedelta
from typing import Any, cast

from lopd_envs.suites.acebench.scenarios.base import Scenario

USERS = {
    "user1": {"user_name": "Eve", "password": "password123", "cash_balance": 2000.0, "bank_balance": 50000.0,
              "membership_level": "regular"},
    "user2": {"user_name": "Frank", "password": "password456", "cash_balance": 8000.0, "bank_balance": 8000.0,
              "membership_level": "silver"},
    "user3": {"user_name": "Grace", "password": "password789", "cash_balance": 1000.0, "bank_balance": 5000.0,
              "membership_level": "gold"},
}

CITIES = {"Beijing": "北京", "Shanghai": "上海", "Nanjing": "南京", "Shenzhen": "深圳", "Xiamen": "厦门",
          "Chengdu": "成都", "Fuzhou": "福州"}
CABINS = {"en": ("Economy Class", "Business Class"), "zh": ("经济舱", "商务舱")}
FREE_BAGS = {"regular": (1, 2), "silver": (2, 3), "gold": (3, 3)}  # (economy, business)
NOW = datetime(2024, 7, 14, 6, 0, 0)

# flight_no, origin, destination, depart, arrive, seats, economy price, business price
_FLIGHTS = [
    ("CA1234", "Beijing", "Shanghai", "2024-07-15 08:00:00", "2024-07-15 10:30:00", 5, 1200, 3000),
    ("MU5678", "Shanghai", "Beijing", "2024-07-16 09:00:00", "2024-07-16 11:30:00", 3, 1900, 3000),
    ("CZ4321", "Shanghai", "Beijing", "2024-07-16 20:00:00", "2024-07-16 22:00:00", 8, 2500, 4000),
    ("CZ4352", "Shanghai", "Beijing", "2024-07-17 20:00:00", "2024-07-17 22:00:00", 8, 1600, 2500),
    ("MU3561", "Beijing", "Nanjing", "2024-07-18 08:00:00", "2024-07-18 10:00:00", 8, 1500, 4000),
    ("MU1566", "Beijing", "Nanjing", "2024-07-18 20:00:00", "2024-07-18 22:00:00", 8, 1500, 4000),
    ("CZ1765", "Nanjing", "Shenzhen", "2024-07-17 20:30:00", "2024-07-17 22:00:00", 8, 1500, 2500),
    ("CZ1765", "Nanjing", "Shenzhen", "2024-07-18 12:30:00", "2024-07-18 15:00:00", 8, 1500, 2500),
    ("MH1765", "Xiamen", "Chengdu", "2024-07-17 12:30:00", "2024-07-17 15:00:00", 8, 1500, 2500),
    ("MH2616", "Chengdu", "Xiamen", "2024-07-18 18:30:00", "2024-07-18 21:00:00", 8, 1500, 2500),
    ("MH2616", "Chengdu", "Fuzhou", "2024-07-16 18:30:00", "2024-07-16 21:00:00", 8, 1500, 2500),
]
# reservation_id, user_id, flight_no, cabin index (0 economy, 1 business), origin, destination
_RESERVATIONS = [("res_1", "user1", "CA1234", 0, "Beijing", "Shanghai"), ("res_2", "user1", "MU5678", 1, "Shanghai", "Beijing"),
                 ("res_3", "user2", "MH1765", 1, "Xiamen", "Chengdu"), ("res_4", "user2", "MU2616", 1, "Chengdu", "Xiamen")]

TEXT = {
    "en": {
        "no_direct": "There are no direct flights that meet the criteria.",
        "bad_login": "Incorrect username or password.",
        "need_id": "Please provide a valid reservation ID or user ID",
        "no_transfer": "No connecting flights that meet the criteria were found.",
        "auth_failed": "Authentication failed. Please check your user ID and password.",
        "bad_payment": "Invalid payment method",
        "cash_short": "Your cash balance is insufficient. Please consider using another payment method.",
        "bank_short": "Your bank balance is insufficient. Please consider using another payment method.",
        "booked": "Booking successful. Reservation ID: {reservation_id}. Total cost: {total} yuan (including baggage fees).",
        "no_reservation": "Reservation not found or user ID does not match.",
        "no_flight": "Flight information not found.",
        "no_user": "User information not found.",
        "flight_changed": "Flight number has been changed.",
        "change_failed": "Flight change failed: Invalid new flight number or destination does not match.",
        "cabin_paid": "Cabin change successful. Price difference paid: {amount}.",
        "cabin_short": "Insufficient balance to pay the cabin price difference.",
        "cabin_refunded": "Cabin change successful. Price difference refunded: {amount}.",
        "bags_paid": "Baggage has been added. Additional fee to be paid: {amount}.",
        "bags_short": "Insufficient balance to pay the additional baggage fees.",
        "no_fee": "Modification completed with no additional fees.",
        "bad_user": "Invalid user ID.",
        "bad_reservation": "Invalid reservation ID or it does not belong to the user.",
        "bad_flight": "Invalid flight information.",
        "used": "The flight segment has been used and cannot be canceled.",
        "airline_reason": "The airline has canceled the flight.",
        "airline_cancel": "The flight has been canceled. Your reservation will be canceled free of charge, and {refund} yuan has been refunded.",
        "free_cancel": "More than 24 hours before departure. Free cancellation successful, {refund} yuan has been refunded.",
        "fee_cancel": "Less than 24 hours before departure. A cancellation fee of {fee} yuan has been deducted, and {refund} yuan has been refunded.",
        "joiner": " ",
    },
    "zh": {
        "no_direct": "没有符合条件的直达航班",
        "bad_login": "用户名或密码不正确",
        "need_id": "请提供有效的预订ID或用户ID",
        "no_transfer": "未找到符合条件的中转航班。",
        "auth_failed": "认证失败，请检查用户ID和密码。",
        "bad_payment": "支付方式无效",
        "cash_short": "cash余额不足，请考虑换一种支付方式",
        "bank_short": "bank余额不足，请考虑换一种支付方式",
        "booked": "预订成功，预订号：{reservation_id}，总费用：{total}元（包含行李费用）。",
        "no_reservation": "预订未找到或用户ID不匹配。",
        "no_flight": "航班信息未找到。",
        "no_user": "用户信息未找到。",
        "flight_changed": "航班号已更改。",
        "change_failed": "航班更改失败：新的航班号无效或目的地不匹配。",
        "cabin_paid": "舱位更改成功。已支付差价: {amount}。",
        "cabin_short": "余额不足，无法支付舱位差价。",
        "cabin_refunded": "舱位更改成功。已退款差价: {amount}。",
        "bags_paid": "行李已增加。需支付额外费用: {amount}。",
        "bags_short": "余额不足，无法支付额外行李费用。",
        "no_fee": "修改完成，无需额外费用。",
        "bad_user": "用户ID无效。",
        "bad_reservation": "预订ID无效或与该用户无关。",
        "bad_flight": "航班信息无效。",
        "used": "航段已使用，无法取消。",
        "airline_reason": "航空公司取消航班",
        "airline_cancel": "航班已取消，您的预订将被免费取消，已退款{refund}元。",
        "free_cancel": "距离出发时间超过24小时，免费取消成功，已退款{refund}元。",
        "fee_cancel": "距离出发时间不足24小时，已扣除取消费{fee}元，退款{refund}元。",
        "joiner": " ",
    },
}


class Travel(Scenario):
    SAVED = ("users", "reservations")

    def __init__(self, language: str = "en"):
        super().__init__(language)
        city = (lambda name: name) if language == "en" else CITIES.__getitem__
        economy, business = CABINS[language]
        self.users = copy.deepcopy(USERS)
        self.flights = [{"flight_no": no, "origin": city(a), "destination": city(b), "depart_time": dep,
                         "arrival_time": arr, "status": "available", "seats_available": seats,
                         "economy_price": eco, "business_price": biz}
                        for no, a, b, dep, arr, seats, eco, biz in _FLIGHTS]
        self.reservations = [{"reservation_id": rid, "user_id": uid, "flight_no": no, "payment_method": "bank",
                              "cabin": (economy, business)[cabin], "baggage": 1, "origin": city(a), "destination": city(b)}
                             for rid, uid, no, cabin, a, b in _RESERVATIONS]

    @property
    def _text(self) -> dict[str, str]:
        return TEXT[self._language]

    @property
    def _economy(self) -> str:
        return CABINS[self._language][0]

    def _free_bags(self) -> dict[str, dict[str, int]]:
        economy, business = CABINS[self._language]
        return {level: {economy: eco, business: biz} for level, (eco, biz) in FREE_BAGS.items()}

    # -- queries -----------------------------------------------------------------------------------
    def get_flight_details(self, origin: str | None = None, destination: str | None = None) -> Any:
        """Flights filtered by origin and/or destination."""
        flights = [f for f in self.flights if (not origin or f["origin"] == origin)
                   and (not destination or f["destination"] == destination)]
        if not flights:
            return self._text["no_direct"]
        return [dict(f) for f in flights]

    def get_user_details(self, user_id: str, password: str) -> dict[str, Any]:
        """A user's profile without the password, if the password matches."""
        user = self.users.get(user_id)
        if user and user["password"] == password:
            return {k: v for k, v in user.items() if k != "password"}
        return {"status": "error", "message": self._text["bad_login"]}

    def get_reservation_details(self, reservation_id: str | None = None, user_id: str | None = None) -> Any:
        """Reservations by reservation id (preferred) or user id, each with its flight's details."""
        if reservation_id:
            found = [r for r in self.reservations if r["reservation_id"] == reservation_id]
        elif user_id:
            found = [r for r in self.reservations if r["user_id"] == user_id]
        else:
            return {"status": "error", "message": self._text["need_id"]}
        return [{**r, "flight_info": next((f for f in self.flights if f["flight_no"] == r["flight_no"]), None)}
                for r in found]

    def authenticate_user(self, user_id: str, password: str) -> dict[str, Any]:
        user = self.users.get(user_id)
        if user and user["password"] == password:
            return user
        return {"status": "error", "message": self._text["bad_login"]}

    def get_baggage_allowance(self, membership_level: str, cabin_class: str) -> int:
        return self._free_bags().get(membership_level, {}).get(cabin_class, 0)

    def find_transfer_flights(self, origin_city: str, transfer_city: str, destination_city: str) -> Any:
        """Pairs of available flights via a transfer city where the first lands before the second leaves."""
        first = [f for f in self.flights if f["origin"] == origin_city and f["destination"] == transfer_city
                 and f["status"] == "available"]
        second = [f for f in self.flights if f["origin"] == transfer_city and f["destination"] == destination_city
                  and f["status"] == "available"]
        pairs = [{"first_leg": a, "second_leg": b} for a in first for b in second
                 if datetime.strptime(a["arrival_time"], "%Y-%m-%d %H:%M:%S")
                 < datetime.strptime(b["depart_time"], "%Y-%m-%d %H:%M:%S")]
        return pairs or self._text["no_transfer"]

    def calculate_baggage_fee(self, membership_level: str, cabin_class: str, baggage_count: int) -> int:
        free = self._free_bags()[membership_level][cabin_class]
        return max(baggage_count - free, 0) * 50

    def update_balance(self, user: dict[str, Any], payment_method: str, amount: float) -> bool:
        """Add ``amount`` to a user's cash or bank balance unless it would go negative."""
        key = {"cash": "cash_balance", "bank": "bank_balance"}.get(payment_method)
        if key is None:
            return True
        if user[key] + amount < 0:
            return False
        user[key] += amount
        return True

    # -- bookings ----------------------------------------------------------------------------------
    def reserve_flight(self, user_id: str, password: str, flight_no: str, cabin: str, payment_method: str,
                       baggage_count: int) -> str:
        """Book a flight, paying the fare plus the fee for bags beyond the free allowance."""
        user = self.authenticate_user(user_id, password)
        if not user:
            return self._text["auth_failed"]
        # no such flight: None fails on the next line, as in the official code
        flight = cast(dict, next((f for f in self.flights if f["flight_no"] == flight_no and f["status"] == "available"),
                                 None))
        price = flight["economy_price"] if cabin == self._economy else flight["business_price"]
        total = price + self.calculate_baggage_fee(user["membership_level"], cabin, baggage_count)
        if payment_method not in ("cash", "bank"):
            return self._text["bad_payment"]
        key = f"{payment_method}_balance"
        account = cast(dict, self.users.get(user_id))  # authenticated above
        if total > account[key]:
            return self._text[f"{payment_method}_short"]
        account[key] -= total
        flight["seats_available"] -= 1
        reservation_id = f"res_{len(self.reservations) + 1}"
        self.reservations.append({"reservation_id": reservation_id, "user_id": user_id, "flight_no": flight_no,
                                  "payment_method": payment_method, "cabin": cabin, "baggage": baggage_count})
        return self._text["booked"].format(reservation_id=reservation_id, total=total)

    def modify_flight(self, user_id: str, reservation_id: str, new_flight_no: str | None = None, new_cabin: str | None = None,
                      add_baggage: int = 0, new_payment_method: str | None = None) -> str:
        """Change a reservation's flight (same route), cabin (paying or refunding the difference) or
        add bags (paying beyond the free allowance)."""
        text = self._text
        reservation = next((r for r in self.reservations
                            if r["reservation_id"] == reservation_id and r["user_id"] == user_id), None)
        if not reservation:
            return text["no_reservation"]
        current = next((f for f in self.flights if f["flight_no"] == reservation["flight_no"]), None)
        if not current:
            return text["no_flight"]
        payment_method = new_payment_method or reservation["payment_method"]
        user = self.users[user_id]
        if not user:
            return text["no_user"]
        notes = []
        if new_flight_no and new_flight_no != reservation["flight_no"]:
            new = next((f for f in self.flights if f["flight_no"] == new_flight_no), None)
            if not (new and new["origin"] == current["origin"] and new["destination"] == current["destination"]):
                return text["change_failed"]
            reservation["flight_no"] = new_flight_no
            notes.append(text["flight_changed"])
        if new_cabin and new_cabin != reservation.get("cabin"):
            difference = self.calculate_price_difference(current, reservation["cabin"], new_cabin)
            reservation["cabin"] = new_cabin
            if difference > 0:
                paid = self.update_balance(user, payment_method, -difference)
                notes.append(text["cabin_paid"].format(amount=difference) if paid else text["cabin_short"])
            elif difference < 0:
                self.update_balance(user, payment_method, -difference)
                notes.append(text["cabin_refunded"].format(amount=-difference))
        if add_baggage > 0:
            allowance = self.get_baggage_allowance(user["membership_level"], reservation["cabin"])
            total_bags = reservation.get("baggage", 0) + add_baggage
            cost = max(0, total_bags - allowance) * 50
            if cost > 0:
                paid = self.update_balance(user, payment_method, -cost)
                notes.append(text["bags_paid"].format(amount=cost) if paid else text["bags_short"])
            reservation["baggage"] = total_bags
        return text["joiner"].join(notes or [text["no_fee"]])

    def cancel_reservation(self, user_id: str, reservation_id: str, reason: str) -> str:
        """Refund a not-yet-flown reservation to the cash balance: in full if the airline cancelled or
        more than a day remains, else less a 10% fee."""
        text = self._text
        user = self.users.get(user_id, None)
        if not user:
            return text["bad_user"]
        reservation = next((r for r in self.reservations
                            if r["reservation_id"] == reservation_id and r["user_id"] == user_id), None)
        if not reservation:
            return text["bad_reservation"]
        flight = next((f for f in self.flights if f["flight_no"] == reservation["flight_no"]), None)
        if not flight:
            return text["bad_flight"]
        depart = datetime.strptime(flight["depart_time"], "%Y-%m-%d %H:%M:%S")
        if depart < NOW:
            return text["used"]
        price = flight["economy_price"] if reservation["cabin"] == self._economy else flight["business_price"]
        if reason == text["airline_reason"]:
            self.process_refund(user, price)
            return text["airline_cancel"].format(refund=price)
        if depart - NOW > timedelta(days=1):
            self.process_refund(user, price)
            return text["free_cancel"].format(refund=price)
        fee = price * 0.1
        self.process_refund(user, price - fee)
        return text["fee_cancel"].format(fee=fee, refund=price - fee)

    def process_refund(self, user: dict[str, Any], amount: float) -> None:
        user["cash_balance"] += amount
        user["user_name"]  # upstream prints it: a user dict without a name fails here, after the refund

    def calculate_price_difference(self, flight: dict[str, Any], old_cabin: str, new_cabin: str) -> float:
        economy, business = CABINS[self._language]
        prices = {economy: flight["economy_price"], business: flight["business_price"]}
        return prices.get(new_cabin, 0) - prices.get(old_cabin, 0)
