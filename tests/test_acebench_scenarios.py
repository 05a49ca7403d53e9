"""The agent scenario classes, method by method: the success case and each documented error, with the
official return messages (English, and Chinese where they differ)."""

from __future__ import annotations

import pytest

from lopd_envs.suites.acebench.scenarios import BaseApi, FoodPlatform, MessageApi, ReminderApi, Travel


def device(cls, language="en", wifi=True, logged_in=True):
    instance = cls(language)
    instance._load_scenario({"wifi": wifi, "logged_in": logged_in})
    return instance


# ------------------------------------------------------------------------------------------ BaseApi

def test_turn_on_wifi_and_login_device():
    api = device(BaseApi, wifi=False, logged_in=False)
    assert api.turn_on_wifi() == {"status": True, "message": "Wi-Fi has been turned on"} and api.wifi is True
    assert api.login_device() == {"status": True, "message": "Device has been logged in"} and api.logged_in is True
    zh = device(BaseApi, "zh", wifi=False)
    assert zh.turn_on_wifi()["message"] == "wifi已经打开" and zh.login_device()["message"] == "设备已经登录"


def test_scenario_defaults_when_the_config_is_silent():
    api = BaseApi()
    api._load_scenario({})
    assert (api.wifi, api.logged_in) == (False, True)


# ---------------------------------------------------------------------------------------- MessageApi

def test_send_message_success_after_making_room():
    api = device(MessageApi)
    assert api.delete_message(message_id=1)["status"]
    assert api.send_message("Eve", "Frank", "hi") == {"status": True, "message": "Message successfully sent to Frank."}
    assert api.inbox[7] == {"sender_id": "USR100", "receiver_id": "USR101", "message": "hi"}


@pytest.mark.parametrize("setup, message", [
    ({"logged_in": False}, "Device not logged in, unable to send message"),
    ({"wifi": False}, "Wi-Fi is turned off, cannot send messages at this time"),
    ({}, "Inbox capacity is full. You need to ask the user which message to delete."),
])
def test_send_message_errors(setup, message):
    api = device(MessageApi, **setup)
    assert api.send_message("Eve", "Frank", "hi") == {"status": False, "message": message}


def test_send_message_to_unknown_user_and_chinese_texts():
    api = device(MessageApi)
    api.delete_message(1)
    assert api.send_message("Eve", "Zoe", "hi") == {"status": False, "message": "Sender or receiver does not exist"}
    zh = device(MessageApi, "zh")
    assert zh.send_message("Eve", "Frank", "你好")["message"] == "内存容量不够了，你需要询问user删除哪一条短信。"
    zh.delete_message(1)
    assert zh.send_message("Eve", "Frank", "你好") == {"status": True, "message": "短信成功发送给Frank。"}


def test_delete_message():
    api = device(MessageApi)
    assert api.delete_message(3) == {"status": True, "message": "Message ID 3 has been successfully deleted."}
    assert api.delete_message(3) == {"status": False, "message": "Message ID does not exist"}
    assert device(MessageApi, logged_in=False).delete_message(1)["message"] == "Device not logged in, unable to delete message"


def test_view_messages_between_users():
    api = device(MessageApi)
    found = api.view_messages_between_users("Frank", "Grace")
    assert found["status"] and found["messages"][0]["id"] == 2 and "Margherita Pizza" in found["messages"][0]["message"]
    assert api.view_messages_between_users("Zoe", "Grace") == {"status": False, "message": "Sender does not exist"}
    assert api.view_messages_between_users("Frank", "Zoe") == {"status": False, "message": "Receiver does not exist"}
    assert api.view_messages_between_users("Eve", "Jack") == {"status": False, "message": "No related message records found"}
    assert device(MessageApi, logged_in=False).view_messages_between_users("Frank", "Grace")["status"] is False
    assert "玛格丽特披萨" in device(MessageApi, "zh").view_messages_between_users("Frank", "Grace")["messages"][0]["message"]


def test_search_messages_needs_no_login():
    api = device(MessageApi, logged_in=False, wifi=False)
    assert [m["id"] for m in api.search_messages("Grace", "pizza")["messages"]] == [2]
    assert api.search_messages("Zoe", "x") == {"status": False, "message": "User does not exist"}
    assert api.search_messages("Grace", "zebra") == {"status": False, "message": "No messages found containing the keyword"}


def test_latest_and_earliest_message_ids_go_by_date():
    api = device(MessageApi)
    assert api.get_latest_message_id() == {"status": True, "message": "The latest message ID is 4", "message_id": 4}
    assert api.get_earliest_message_id() == {"status": True, "message": "The earliest message ID is 3", "message_id": 3}
    assert device(MessageApi, "zh").get_earliest_message_id()["message"] == "最早的短信ID是 3"
    logged_out = device(MessageApi, logged_in=False)
    assert logged_out.get_latest_message_id()["message"] == "Device not logged in, unable to retrieve the latest sent message ID."
    assert logged_out.get_earliest_message_id()["message"] == "Device not logged in, unable to retrieve the earliest sent message ID."
    for i in range(1, 7):
        api.delete_message(i)
    assert api.get_latest_message_id() == {"status": False, "message": "No message records found"}


def test_message_times_by_id():
    assert device(MessageApi).get_all_message_times_with_ids()[3] == "2023-12-05"
    assert device(MessageApi, logged_in=False).get_all_message_times_with_ids()["status"] is False


def test_sent_messages_have_no_time_so_date_queries_then_fail_as_upstream():
    api = device(MessageApi)
    api.delete_message(1)
    api.send_message("Eve", "Frank", "hi")
    with pytest.raises(KeyError):
        api.get_latest_message_id()
    with pytest.raises(KeyError):
        api.get_all_message_times_with_ids()


# --------------------------------------------------------------------------------------- ReminderApi

def test_view_reminder_by_title():
    api = device(ReminderApi)
    assert api.view_reminder_by_title("Team Meeting")["reminder"]["reminder_id"] == 1002
    assert api.view_reminder_by_title("Nope") == {"status": False, "message": "No reminder found with the title 'Nope'."}
    assert device(ReminderApi, logged_in=False).view_reminder_by_title("Team Meeting") == {
        "status": False, "message": "The device is not logged in, so you cannot view notifications"}
    assert "盒马生鲜" in device(ReminderApi, "zh").view_reminder_by_title("To-do list")["reminder"]["description"]


def test_add_reminder_numbers_from_four_and_holds_six():
    api = device(ReminderApi)
    assert api.add_reminder("A", "a", "2024-06-11 16:00") == {"status": True, "message": "Reminder 'A' was successfully added."}
    assert api.reminder_list[4] == {"reminder_id": 4, "title": "A", "description": "a", "time": "2024-06-11 16:00", "notified": False}
    api.add_reminder("B", "b", "t")
    api.add_reminder("C", "c", "t")
    assert api.add_reminder("D", "d", "t") == {"status": False, "message": "Reminder capacity is full. Unable to add a new reminder."}
    assert device(ReminderApi, logged_in=False).add_reminder("A", "a", "t")["message"] == "Device not logged in. Unable to add a new reminder."
    assert device(ReminderApi, "zh").add_reminder("A", "a", "t")["message"] == "提醒 'A' 已成功添加"


def test_delete_and_view_all_reminders():
    api = device(ReminderApi)
    assert api.delete_reminder(2) == {"status": True, "message": "Reminder ID 2 was successfully deleted."}
    assert api.delete_reminder(2) == {"status": False, "message": "Reminder ID does not exist."}
    assert device(ReminderApi, logged_in=False).delete_reminder(1)["status"] is False
    assert [r["title"] for r in api.view_all_reminders()["reminders"]] == ["Doctor's Appointment", "To-do list"]
    api.delete_reminder(1)
    api.delete_reminder(3)
    assert api.view_all_reminders() == {"status": False, "message": "No reminders found."}


def test_chinese_reminders_have_search_and_mark_as_notified():
    zh = device(ReminderApi, "zh")
    assert zh.search_reminders("不存在") == {"status": False, "message": "没有找到包含该关键词的提醒"}
    with pytest.raises(AttributeError):  # upstream formats the stored time string as a datetime
        zh.search_reminders("Meeting")
    assert zh.mark_as_notified(1) == {"status": True, "message": "提醒ID 1 已标记为已通知"} and zh.reminder_list[1]["notified"]
    assert zh.mark_as_notified(9) == {"status": False, "message": "提醒ID不存在"}
    assert "search_reminders" in ReminderApi.UNAVAILABLE["en"]


# -------------------------------------------------------------------------------------- FoodPlatform

def test_login_food_platform():
    api = device(FoodPlatform)
    assert api.login_food_platform("Eve", "password123") == {"status": True, "message": "User Eve has successfully logged in!"}
    assert api.login_food_platform("Eve", "password123") == {"status": False, "message": "Eve is already logged in"}
    assert api.login_food_platform("Zoe", "x") == {"status": False, "message": "User does not exist"}
    assert api.login_food_platform("Frank", "nope") == {"status": False, "message": "Incorrect password"}
    assert device(FoodPlatform, wifi=False).login_food_platform("Eve", "password123") == {
        "status": False, "message": "Wi-Fi is not enabled, unable to login"}
    assert device(FoodPlatform, "zh").login_food_platform("Eve", "password123")["message"] == "用户Eve登陆成功！"
    assert api.view_logged_in_users() == {"status": True, "logged_in_users": ["Eve"]}
    assert device(FoodPlatform).view_logged_in_users()["status"] is False


def test_check_balance_and_get_products():
    api = device(FoodPlatform)
    assert api.check_balance("Eve") == 500.0 and api.check_balance("Zoe") == 0.0
    assert api.get_products("Heytea") == [{"product": "Cheese Milk Tea", "price": 25.0},
                                          {"product": "Four Seasons Spring Milk Tea", "price": 22.0}]
    assert api.get_products("KFC") == {"status": False, "message": "Merchant 'KFC' does not exist"}
    assert device(FoodPlatform, "zh").get_products("喜茶")[0]["product"] == "芝士奶茶"


def test_add_food_delivery_order_success():
    api = device(FoodPlatform)
    api.login_food_platform("Eve", "password123")
    result = api.add_food_delivery_order("Eve", "Domino's", [{"product": "Super Supreme Pizza", "quantity": 1}])
    assert result == {"status": True, "message": "Food delivery order successfully placed with Domino's. Total amount: 88.0 yuan"}
    assert api.users["Eve"]["balance"] == 412.0
    assert api.orders == [{"user_name": "Eve", "merchant_name": "Domino's", "total_price": 88.0,
                           "items": [{"product": "Super Supreme Pizza", "quantity": 1, "price_per_unit": 88.0}]}]
    assert api.view_orders("Eve")["orders"] == api.orders and api.view_orders("Frank")["status"] is False
    assert api.search_orders("supreme")["orders"] == api.orders and api.search_orders("sushi")["status"] is False


@pytest.mark.parametrize("user, merchant, items, message", [
    ("Frank", "Domino's", [{"product": "Margherita Pizza", "quantity": 1}], "User Frank is not logged in to the food platform"),
    ("Eve", "KFC", [{"product": "Burger", "quantity": 1}], "Merchant does not exist"),
    ("Eve", "Domino's", [{"product": "Margherita Pizza", "quantity": 0}], "Invalid quantity 0 for product Margherita Pizza"),
    ("Eve", "Domino's", [{"product": "Margherita Pizza", "quantity": "2"}], "Invalid quantity 2 for product Margherita Pizza"),
    ("Eve", "Domino's", [{"product": "Calzone", "quantity": 1}], "Product Calzone does not exist in Domino's's menu"),
    ("Eve", "Jiutian BBQ", [{"product": "Korean Grilled Beef", "quantity": 4}], "Insufficient balance to place the order"),
])
def test_add_food_delivery_order_errors(user, merchant, items, message):
    api = device(FoodPlatform)
    api.login_food_platform("Eve", "password123")
    assert api.add_food_delivery_order(user, merchant, items) == {"status": False, "message": message}
    assert api.orders == []


def test_spending_the_exact_balance_is_allowed_in_english_but_not_in_chinese():
    en, zh = device(FoodPlatform), device(FoodPlatform, "zh")
    en.login_food_platform("Jack", "password654")
    zh.login_food_platform("Jack", "password654")
    assert en.add_food_delivery_order("Jack", "Hema Fresh", [{"product": "Organic Vegetable Pack", "quantity": 8}])["status"]
    assert zh.add_food_delivery_order("Jack", "盒马生鲜", [{"product": "有机蔬菜包", "quantity": 8}]) == {
        "status": False, "message": "余额不足，无法下单"}


# -------------------------------------------------------------------------------------------- Travel

def test_get_flight_details_and_transfers():
    api = Travel()
    assert [f["flight_no"] for f in api.get_flight_details("Beijing", "Shanghai")] == ["CA1234"]
    assert len(api.get_flight_details(destination="Beijing")) == 3
    assert api.get_flight_details("Beijing", "Tokyo") == "There are no direct flights that meet the criteria."
    pairs = api.find_transfer_flights("Beijing", "Nanjing", "Shenzhen")
    assert [(p["first_leg"]["flight_no"], p["second_leg"]["depart_time"]) for p in pairs] == [("MU3561", "2024-07-18 12:30:00")]
    assert api.find_transfer_flights("Beijing", "Xiamen", "Shenzhen") == "No connecting flights that meet the criteria were found."
    assert Travel("zh").get_flight_details("北京", "上海")[0]["flight_no"] == "CA1234"


def test_get_user_and_reservation_details():
    api = Travel()
    assert api.get_user_details("user2", "password456") == {"user_name": "Frank", "cash_balance": 8000.0,
                                                            "bank_balance": 8000.0, "membership_level": "silver"}
    assert api.get_user_details("user2", "x") == {"status": "error", "message": "Incorrect username or password."}
    res = api.get_reservation_details(reservation_id="res_1")
    assert res[0]["flight_info"]["flight_no"] == "CA1234"
    assert [r["reservation_id"] for r in api.get_reservation_details(user_id="user2")] == ["res_3", "res_4"]
    assert api.get_reservation_details() == {"status": "error", "message": "Please provide a valid reservation ID or user ID"}


def test_reserve_flight_success_with_extra_bags():
    api = Travel()
    result = api.reserve_flight("user1", "password123", "CZ4321", "Economy Class", "bank", 3)
    assert result == "Booking successful. Reservation ID: res_5. Total cost: 2600 yuan (including baggage fees)."
    assert api.users["user1"]["bank_balance"] == 47400.0
    assert api.reservations[-1] == {"reservation_id": "res_5", "user_id": "user1", "flight_no": "CZ4321",
                                    "payment_method": "bank", "cabin": "Economy Class", "baggage": 3}
    zh = Travel("zh")
    assert zh.reserve_flight("user1", "password123", "CZ4321", "经济舱", "bank", 1) == "预订成功，预订号：res_5，总费用：2500元（包含行李费用）。"


def test_reserve_flight_errors():
    api = Travel()
    assert api.reserve_flight("user3", "password789", "CZ4321", "Business Class", "cash", 0) == \
        "Your cash balance is insufficient. Please consider using another payment method."
    assert api.reserve_flight("user1", "password123", "CZ4321", "Economy Class", "card", 1) == "Invalid payment method"
    with pytest.raises(KeyError):  # a wrong password is never reported as such (upstream quirk)
        api.reserve_flight("user1", "wrong", "CZ4321", "Economy Class", "bank", 1)
    with pytest.raises(TypeError):  # an unknown flight
        api.reserve_flight("user1", "password123", "XX0000", "Economy Class", "bank", 1)
    assert len(api.reservations) == 4


def test_modify_flight():
    api = Travel()
    assert api.modify_flight("user1", "res_2", new_flight_no="CZ4321") == "Flight number has been changed."
    assert api.modify_flight("user1", "res_2", new_flight_no="CA1234") == \
        "Flight change failed: Invalid new flight number or destination does not match."
    assert api.modify_flight("user1", "res_1", new_cabin="Business Class") == "Cabin change successful. Price difference paid: 1800."
    assert api.users["user1"]["bank_balance"] == 48200.0
    assert api.modify_flight("user1", "res_1", add_baggage=1) == "Modification completed with no additional fees."
    assert api.modify_flight("user1", "res_1", add_baggage=1) == "Baggage has been added. Additional fee to be paid: 50."
    assert api.modify_flight("user2", "res_1") == "Reservation not found or user ID does not match."
    assert api.modify_flight("user1", "res_1", new_cabin="Economy Class", new_payment_method="cash") == \
        "Cabin change successful. Price difference refunded: 1800."


def test_cancel_reservation():
    api = Travel()
    assert api.cancel_reservation("user1", "res_1", "change of plans") == \
        "More than 24 hours before departure. Free cancellation successful, 1200 yuan has been refunded."
    assert api.users["user1"]["cash_balance"] == 3200.0 and len(api.reservations) == 4  # kept, as upstream
    assert api.cancel_reservation("user1", "res_2", "The airline has canceled the flight.") == \
        "The flight has been canceled. Your reservation will be canceled free of charge, and 3000 yuan has been refunded."
    assert api.cancel_reservation("user9", "res_1", "x") == "Invalid user ID."
    assert api.cancel_reservation("user2", "res_1", "x") == "Invalid reservation ID or it does not belong to the user."
    assert api.cancel_reservation("user2", "res_4", "x") == "Invalid flight information."  # MU2616 is not a flight
    assert Travel("zh").cancel_reservation("user1", "res_2", "航空公司取消航班") == "航班已取消，您的预订将被免费取消，已退款3000元。"


@pytest.mark.parametrize("language", ["en", "zh"])
def test_every_function_documented_in_the_agent_data_is_a_scenario_method(language):
    """Each function doc of the agent rows names a method of one of our scenario classes, except the
    English ``search_reminders``, which the official English class lacks too. (A row documents the whole
    phone API even when only some apps are involved; calls to the others fail as unknown functions.)"""
    from lopd_envs.suites.acebench.data import load_rows
    from lopd_envs.suites.acebench.executor import Executor
    from lopd_envs.suites.acebench.scenarios import SCENARIOS

    methods = set(Executor(list(SCENARIOS), {}, language, False).methods())
    documented = {f["name"] for category in ("agent_multi_step", "agent_multi_turn")
                  for row in load_rows(category, language) for f in row.question["function"]}
    assert len(documented) >= 21
    assert documented - methods == ({"search_reminders"} if language == "en" else set())
