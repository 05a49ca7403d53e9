"""ACEBench's agent scenarios, written by lopd from the benchmark's function docs and documented
behaviour (the official classes are not published as a package). One module per scenario class."""

from lopd_envs.suites.acebench.scenarios.base import BaseApi, Scenario
from lopd_envs.suites.acebench.scenarios.food import FoodPlatform
from lopd_envs.suites.acebench.scenarios.message import MessageApi
from lopd_envs.suites.acebench.scenarios.reminder import ReminderApi
from lopd_envs.suites.acebench.scenarios.travel import Travel

SCENARIOS: dict[str, type[Scenario]] = {cls.__name__: cls for cls in (BaseApi, MessageApi, ReminderApi, FoodPlatform, Travel)}

__all__ = ["SCENARIOS", "BaseApi", "FoodPlatform", "MessageApi", "ReminderApi", "Scenario", "Travel"]
