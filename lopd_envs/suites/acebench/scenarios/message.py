"""The phone's text messages (``MessageApi``), written from ACEBench's function docs and behaviour.

Six fixed users and a six-message inbox keyed by integer id (the ids become strings in the saved end
state, which is why states are compared after a JSON round trip). The inbox holds at most six messages:
sending to a full inbox fails and asks the agent to have the user delete one. Sending needs the device
logged in and Wi-Fi on; reading and deleting need the login only; ``search_messages`` needs neither.
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

from lopd_envs.suites.acebench.scenarios.base import BaseApi, with_device_text

USERS = {
    "Eve": {"user_id": "USR100", "phone_number": "123-456-7890", "occupation": "Software Engineer"},
    "Frank": {"user_id": "USR101", "phone_number": "234-567-8901", "occupation": "Data Scientist"},
    "Grace": {"user_id": "USR102", "phone_number": "345-678-9012", "occupation": "Product Manager"},
    "Helen": {"user_id": "USR103", "phone_number": "456-789-0123", "occupation": "UX Designer"},
    "Isaac": {"user_id": "USR104", "phone_number": "567-890-1234", "occupation": "DevOps Engineer"},
    "Jack": {"user_id": "USR105", "phone_number": "678-901-2345", "occupation": "Marketing Specialist"},
}

# Messages 2 and 3 are tasks for the agent (a pizza order, a milk-tea order) and differ per language.
_ORDER_PIZZA = {"en": "Can you help me order a \"Margherita Pizza\" delivery? The merchant is Domino's.",
                "zh": "你能帮我点一个\"玛格丽特披萨\"的外卖吗,商家是达美乐。"}
_ORDER_TEA = {"en": "Please check the milk tea delivery options available from Heytea and purchase a cheaper milk "
                    "tea for me. After making the purchase, remember to reply to me with \"Already bought.\"",
              "zh": "帮我查一些喜茶有哪些奶茶外卖，买一杯便宜些的奶茶。买完以后记得回复我,回复的内容是（已经买好了）"}


def initial_inbox(language: str) -> dict[int, dict[str, str]]:
    return {
        1: {"sender_id": "USR100", "receiver_id": "USR101",
            "message": "Hey Frank, don't forget about our meeting on 2024-06-11 at 4 PM in Conference Room 1.",
            "time": "2024-06-09"},
        2: {"sender_id": "USR101", "receiver_id": "USR102", "message": _ORDER_PIZZA[language], "time": "2024-03-09"},
        3: {"sender_id": "USR102", "receiver_id": "USR103", "message": _ORDER_TEA[language], "time": "2023-12-05"},
        4: {"sender_id": "USR103", "receiver_id": "USR102", "message": "No problem Helen, I can assist you.",
            "time": "2024-09-09"},
        5: {"sender_id": "USR104", "receiver_id": "USR105", "message": "Isaac, are you available for a call?",
            "time": "2024-06-06"},
        6: {"sender_id": "USR105", "receiver_id": "USR104", "message": "Yes Jack, let's do it in 30 minutes.",
            "time": "2024-01-15"},
    }


TEXT = with_device_text({
    "en": {
        "send_not_logged_in": "Device not logged in, unable to send message",
        "wifi_off": "Wi-Fi is turned off, cannot send messages at this time",
        "inbox_full": "Inbox capacity is full. You need to ask the user which message to delete.",
        "no_sender_or_receiver": "Sender or receiver does not exist",
        "sent": "Message successfully sent to {receiver}.",
        "delete_not_logged_in": "Device not logged in, unable to delete message",
        "no_message_id": "Message ID does not exist",
        "deleted": "Message ID {message_id} has been successfully deleted.",
        "view_not_logged_in": "Device not logged in, unable to view message information",
        "no_sender": "Sender does not exist",
        "no_receiver": "Receiver does not exist",
        "no_records": "No related message records found",
        "no_user": "User does not exist",
        "no_keyword_match": "No messages found containing the keyword",
        "times_not_logged_in": "Device not logged in, unable to retrieve all message times and their corresponding message IDs.",
        "latest_not_logged_in": "Device not logged in, unable to retrieve the latest sent message ID.",
        "earliest_not_logged_in": "Device not logged in, unable to retrieve the earliest sent message ID.",
        "empty_inbox": "No message records found",
        "latest": "The latest message ID is {message_id}",
        "earliest": "The earliest message ID is {message_id}",
    },
    "zh": {
        "send_not_logged_in": "device未登录，无法发送短信",
        "wifi_off": "wifi关闭，此时不能发送信息",
        "inbox_full": "内存容量不够了，你需要询问user删除哪一条短信。",
        "no_sender_or_receiver": "发送者或接收者不存在",
        "sent": "短信成功发送给{receiver}。",
        "delete_not_logged_in": "device未登录，无法删除短信",
        "no_message_id": "短信ID不存在",
        "deleted": "短信ID {message_id} 已成功删除。",
        "view_not_logged_in": "device未登录，无法查看短信信息",
        "no_sender": "发送者不存在",
        "no_receiver": "接收者不存在",
        "no_records": "没有找到相关的短信记录",
        "no_user": "用户不存在",
        "no_keyword_match": "没有找到包含关键词的短信",
        "times_not_logged_in": "device未登录，获取所有短信的时间以及对应的短信编号。",
        "latest_not_logged_in": "device未登录，无法获取最新发送的短信ID。",
        "earliest_not_logged_in": "device未登录，无法获取最早发送的短信ID",
        "empty_inbox": "短信记录为空",
        "latest": "最新的短信ID是 {message_id}",
        "earliest": "最早的短信ID是 {message_id}",
    },
})


class MessageApi(BaseApi):
    SAVED = ("inbox",)
    TEXT = TEXT

    def __init__(self, language: str = "en"):
        super().__init__(language)
        self.max_capacity = 6
        self.user_list = copy.deepcopy(USERS)
        self.inbox: dict[int, dict[str, Any]] = initial_inbox(language)
        self.message_id_counter = 6

    def send_message(self, sender_name: str, receiver_name: str, message: str) -> dict[str, Any]:
        """Send a message from one user to another."""
        if self.logged_in == False:  # noqa: E712 - the official check (a truthy non-bool passes)
            return self._say(False, "send_not_logged_in")
        if self.wifi == False:  # noqa: E712
            return self._say(False, "wifi_off")
        if len(self.inbox) >= self.max_capacity:
            return self._say(False, "inbox_full")
        if sender_name not in self.user_list or receiver_name not in self.user_list:
            return self._say(False, "no_sender_or_receiver")
        self.message_id_counter += 1
        self.inbox[self.message_id_counter] = {"sender_id": self.user_list[sender_name]["user_id"],
                                               "receiver_id": self.user_list[receiver_name]["user_id"],
                                               "message": message}
        return self._say(True, "sent", receiver=receiver_name)

    def delete_message(self, message_id: int) -> dict[str, Any]:
        """Delete a message based on its message ID."""
        if self.logged_in == False:  # noqa: E712
            return self._say(False, "delete_not_logged_in")
        if message_id not in self.inbox:
            return self._say(False, "no_message_id")
        del self.inbox[message_id]
        return self._say(True, "deleted", message_id=message_id)

    def view_messages_between_users(self, sender_name: str, receiver_name: str) -> dict[str, Any]:
        """Get all the messages sent from one user to another."""
        if self.logged_in == False:  # noqa: E712
            return self._say(False, "view_not_logged_in")
        if sender_name not in self.user_list:
            return self._say(False, "no_sender")
        if receiver_name not in self.user_list:
            return self._say(False, "no_receiver")
        sender_id = self.user_list[sender_name]["user_id"]
        receiver_id = self.user_list[receiver_name]["user_id"]
        found = [{"id": msg_id, "sender": sender_name, "receiver": receiver_name, "message": msg["message"]}
                 for msg_id, msg in self.inbox.items()
                 if msg["sender_id"] == sender_id and msg["receiver_id"] == receiver_id]
        if not found:
            return self._say(False, "no_records")
        return {"status": True, "messages": found}

    def search_messages(self, user_name: str, keyword: str) -> dict[str, Any]:
        """Search for messages from a specific user (sent or received) that contain a keyword."""
        if user_name not in self.user_list:
            return self._say(False, "no_user")
        user_id = self.user_list[user_name]["user_id"]
        found = [{"id": msg_id, "sender_id": msg["sender_id"], "receiver_id": msg["receiver_id"], "message": msg["message"]}
                 for msg_id, msg in self.inbox.items()
                 if user_id in (msg["sender_id"], msg["receiver_id"]) and keyword.lower() in msg["message"].lower()]
        if not found:
            return self._say(False, "no_keyword_match")
        return {"status": True, "messages": found}

    def get_all_message_times_with_ids(self) -> dict[Any, Any]:
        """Map every message id to its time (sent messages have no time and raise, as upstream)."""
        if self.logged_in == False:  # noqa: E712
            return self._say(False, "times_not_logged_in")
        return {msg_id: msg["time"] for msg_id, msg in self.inbox.items()}

    def _extreme_message_id(self, latest: bool) -> dict[str, Any]:
        best_id, best_time = None, None
        for msg_id, msg in self.inbox.items():
            when = datetime.strptime(msg["time"], "%Y-%m-%d")  # a sent message has no "time": KeyError
            if best_time is None or (when > best_time if latest else when < best_time):
                best_id, best_time = msg_id, when
        key = "latest" if latest else "earliest"
        return {**self._say(True, key, message_id=best_id), "message_id": best_id}

    def get_latest_message_id(self) -> dict[str, Any]:
        """Get the ID of the most recently sent message (by its date)."""
        if self.logged_in == False:  # noqa: E712
            return self._say(False, "latest_not_logged_in")
        if not self.inbox:
            return self._say(False, "empty_inbox")
        return self._extreme_message_id(latest=True)

    def get_earliest_message_id(self) -> dict[str, Any]:
        """Get the ID of the earliest sent message (by its date)."""
        if self.logged_in == False:  # noqa: E712
            return self._say(False, "earliest_not_logged_in")
        if not self.inbox:
            return self._say(False, "empty_inbox")
        return self._extreme_message_id(latest=False)
