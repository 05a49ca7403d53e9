"""The simulated phone's device state (``BaseApi``): Wi-Fi and login, shared by the phone apps.

Written from ACEBench's function docs and documented behaviour. Every phone app (messages, reminders,
food platform) *is* a ``BaseApi``: the official harness runs a device method such as ``turn_on_wifi`` on
every involved instance that has it, which is how the apps see the device state change. Class and method
names match the official ones because the harness's error strings quote them (Python's own
``BaseApi.turn_on_wifi() got an unexpected keyword argument 'x'``).

Return messages are the official ones per language (``TEXT[language][key]``).
"""

from __future__ import annotations

from typing import Any, ClassVar

TEXT = {
    "en": {"wifi_on": "Wi-Fi has been turned on", "logged_in": "Device has been logged in"},
    "zh": {"wifi_on": "wifi已经打开", "logged_in": "设备已经登录"},
}


def with_device_text(extra: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """A phone app's message table: the device messages plus the app's own, per language."""
    return {language: {**TEXT[language], **extra[language]} for language in TEXT}


class Scenario:
    """What the executor needs from a scenario class: a language, a config loader, and the attributes the
    harness saves as the end state (``SAVED``). ``UNAVAILABLE`` lists public methods that the official
    class of a language lacks (calling them fails as an unknown function there)."""

    SAVED: ClassVar[tuple[str, ...]] = ()
    UNAVAILABLE: ClassVar[dict[str, frozenset[str]]] = {}

    def __init__(self, language: str = "en"):
        self._language = language

    def _load_scenario(self, config: dict[str, Any]) -> None:
        """Apply an ``initial_config`` entry; the harness calls it twice: the class's own entry, then
        ``BaseApi``'s."""

    def _state(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.SAVED if name in vars(self)}


class BaseApi(Scenario):
    SAVED = ("wifi", "logged_in")
    TEXT: ClassVar[dict[str, dict[str, str]]] = TEXT

    def __init__(self, language: str = "en"):
        super().__init__(language)
        self.wifi = False
        self.logged_in = True

    def _load_scenario(self, config: dict[str, Any]) -> None:
        self.wifi = config.get("wifi", False)
        self.logged_in = config.get("logged_in", True)

    def _say(self, status: bool, key: str, **values: Any) -> dict[str, Any]:
        return {"status": status, "message": self._text[key].format(**values)}

    @property
    def _text(self) -> dict[str, str]:
        return self.TEXT[self._language]

    def turn_on_wifi(self) -> dict[str, Any]:
        """Turn on WiFi connection."""
        self.wifi = True
        return self._say(True, "wifi_on")

    def login_device(self) -> dict[str, Any]:
        """Log in to the device."""
        self.logged_in = True
        return self._say(True, "logged_in")
