"""The phone's reminders (``ReminderApi``), written from ACEBench's function docs and behaviour.

Three seeded reminders keyed 1-3 (the third is a to-do list the agent may be asked to carry out), at most
six in all; new ones get ids from a counter starting at 4. Every operation but listing needs the device
logged in. The Chinese class also offers ``mark_as_notified`` and ``search_reminders``; the English one
lacks them (calling them there fails like any unknown function), and the Chinese search fails on any hit
because it formats the stored time string as a datetime. Both quirks are the official behaviour.
"""

from __future__ import annotations

from typing import Any, ClassVar

from lopd_envs.suites.acebench.scenarios.base import BaseApi, with_device_text

_TODO = {
    "en": "First, help Frank place a food delivery order at \"Hema Fresh,\" ordering two \"Fresh Gift Packs.\" "
          "Then, send a message to Frank saying, \"The price of the purchased goods is () yuan.\" Replace the "
          "parentheses with the actual amount, keeping one decimal place.",
    "zh": "首先帮Frank在\"盒马生鲜\"点外卖，需要定两个\"生鲜大礼包\"，再发短信告诉Frank：\"购买商品的价格是()元\"。"
          "要把括号换成实际金额，保留一位小数。",
}


def initial_reminders(language: str) -> dict[int, dict[str, Any]]:
    return {
        1: {"reminder_id": 1001, "title": "Doctor's Appointment", "description": "Visit Dr. Smith for a checkup.",
            "time": "2024-07-15 09:30", "notified": False},
        2: {"reminder_id": 1002, "title": "Team Meeting", "description": "Monthly project review with the team.",
            "time": "2024-07-17 11:00", "notified": False},
        3: {"reminder_id": 1003, "title": "To-do list", "description": _TODO[language],
            "time": "2024-07-16 11:00", "notified": False},
    }


TEXT = with_device_text({
    "en": {
        "view_not_logged_in": "The device is not logged in, so you cannot view notifications",
        "no_title": "No reminder found with the title '{title}'.",
        "add_not_logged_in": "Device not logged in. Unable to add a new reminder.",
        "full": "Reminder capacity is full. Unable to add a new reminder.",
        "added": "Reminder '{title}' was successfully added.",
        "delete_not_logged_in": "Device not logged in. Unable to delete the specified reminder.",
        "no_id": "Reminder ID does not exist.",
        "deleted": "Reminder ID {reminder_id} was successfully deleted.",
        "none": "No reminders found.",
    },
    "zh": {
        "view_not_logged_in": "device未登录，无法查看提醒",
        "no_title": "没有找到标题为 '{title}' 的提醒",
        "add_not_logged_in": "device未登录，无法添加一个新的提醒",
        "full": "提醒容量已满，无法添加新的提醒",
        "added": "提醒 '{title}' 已成功添加",
        "delete_not_logged_in": "device未登录，无法删除指定的提醒",
        "no_id": "提醒ID不存在",
        "deleted": "提醒ID {reminder_id} 已成功删除",
        "none": "没有任何提醒",
        "notified": "提醒ID {reminder_id} 已标记为已通知",
        "no_keyword_match": "没有找到包含该关键词的提醒",
    },
})


class ReminderApi(BaseApi):
    SAVED = ("reminder_list",)
    TEXT = TEXT
    UNAVAILABLE: ClassVar[dict[str, frozenset[str]]] = {"en": frozenset({"mark_as_notified", "search_reminders"})}

    def __init__(self, language: str = "en"):
        super().__init__(language)
        self.max_capacity = 6
        self.reminder_list: dict[int, dict[str, Any]] = initial_reminders(language)
        self.reminder_id_counter = 3

    def view_reminder_by_title(self, title: str) -> dict[str, Any]:
        """View a specific reminder by its title."""
        if self.logged_in == False:  # noqa: E712
            return self._say(False, "view_not_logged_in")
        for reminder in self.reminder_list.values():
            if reminder["title"] == title:
                return {"status": True, "reminder": reminder}
        return self._say(False, "no_title", title=title)

    def add_reminder(self, title: str, description: str, time: Any) -> dict[str, Any]:
        """Add a new reminder (time in the format YYYY-MM-DD HH:MM, stored as given)."""
        if self.logged_in == False:  # noqa: E712
            return self._say(False, "add_not_logged_in")
        if len(self.reminder_list) >= self.max_capacity:
            return self._say(False, "full")
        self.reminder_id_counter += 1
        self.reminder_list[self.reminder_id_counter] = {"reminder_id": self.reminder_id_counter, "title": title,
                                                        "description": description, "time": time, "notified": False}
        return self._say(True, "added", title=title)

    def delete_reminder(self, reminder_id: int) -> dict[str, Any]:
        """Delete a reminder by its key in the reminder list."""
        if self.logged_in == False:  # noqa: E712
            return self._say(False, "delete_not_logged_in")
        if reminder_id not in self.reminder_list:
            return self._say(False, "no_id")
        del self.reminder_list[reminder_id]
        return self._say(True, "deleted", reminder_id=reminder_id)

    def view_all_reminders(self) -> dict[str, Any]:
        """List all reminders (no login needed)."""
        if not self.reminder_list:
            return self._say(False, "none")
        return {"status": True, "reminders": [{key: r[key] for key in ("title", "description", "time", "notified")}
                                              for r in self.reminder_list.values()]}

    def mark_as_notified(self, reminder_id: int) -> dict[str, Any]:
        """Mark a reminder as notified (Chinese class only)."""
        if reminder_id not in self.reminder_list:
            return self._say(False, "no_id")
        self.reminder_list[reminder_id]["notified"] = True
        return self._say(True, "notified", reminder_id=reminder_id)

    def search_reminders(self, keyword: str) -> dict[str, Any]:
        """Search reminders by a keyword in title or description (Chinese class only)."""
        found = []
        for reminder in self.reminder_list.values():
            if keyword.lower() in reminder["title"].lower() or keyword.lower() in reminder["description"].lower():
                found.append({"title": reminder["title"], "description": reminder["description"],
                              "time": reminder["time"].strftime("%Y-%m-%d %H:%M")})  # str: AttributeError, as upstream
        if not found:
            return self._say(False, "no_keyword_match")
        return {"status": True, "reminders": found}
