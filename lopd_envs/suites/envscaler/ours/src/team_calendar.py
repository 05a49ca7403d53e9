from typing import Dict, List, TypedDict


class EventInfo(TypedDict):
    title: str
    date: str
    start: str
    end: str
    room: str
    attendees: List[str]
    status: str  # "scheduled" or "cancelled"


class TeamCalendar:
    def __init__(self, init_config: dict):
        """
        A team calendar with meeting rooms (lopd's own environment, EnvScaler format).
        """
        # Events: {event_id: EventInfo}
        self.events: Dict[str, EventInfo] = {}
        # Rooms: {room: capacity}
        self.rooms: Dict[str, int] = {}
        # Number used for the next event id (EV-<n>)
        self.next_event_number: int = 1
        self.init_config = init_config

    @staticmethod
    def _minutes(hhmm: str) -> int:
        hours, minutes = hhmm.split(":")
        return int(hours) * 60 + int(minutes)

    def _conflict(self, date: str, start: str, end: str, room: str, people: List[str], skip: str = "") -> str:
        s, e = self._minutes(start), self._minutes(end)
        for event_id, ev in self.events.items():
            if event_id == skip or ev["status"] != "scheduled" or ev["date"] != date:
                continue
            if s < self._minutes(ev["end"]) and self._minutes(ev["start"]) < e:
                if ev["room"] == room:
                    return f"Room {room} is taken by {event_id}"
                busy = sorted(set(people) & set(ev["attendees"]))
                if busy:
                    return f"{', '.join(busy)} already in {event_id}"
        return ""

    def _valid_times(self, start: str, end: str) -> str:
        try:
            s, e = self._minutes(start), self._minutes(end)
        except (ValueError, AttributeError):
            return "Times must be HH:MM"
        if not (8 * 60 <= s < e <= 18 * 60):
            return "Events must start before they end, within 08:00-18:00"
        return ""

    def list_events(self, date: str) -> dict:
        """
        List scheduled events on a date ("YYYY-MM-DD").
        """
        found = {i: dict(ev) for i, ev in self.events.items() if ev["date"] == date and ev["status"] == "scheduled"}
        return {"success": True, "data": found}

    def get_event(self, event_id: str) -> dict:
        """
        Look up one event.
        """
        ev = self.events.get(event_id)
        if ev is None:
            return {"success": False, "error": f"Event {event_id} not found"}
        return {"success": True, "data": dict(ev)}

    def create_event(self, title: str, date: str, start: str, end: str, room: str, attendees: List[str]) -> dict:
        """
        Schedule an event.

        Constraints:
            - 08:00 <= start < end <= 18:00 (HH:MM).
            - The room must exist, hold all attendees, and be free; no attendee may be double-booked.
        """
        problem = self._valid_times(start, end)
        if problem:
            return {"success": False, "error": problem}
        if room not in self.rooms:
            return {"success": False, "error": f"Unknown room {room}"}
        if len(attendees) > self.rooms[room]:
            return {"success": False, "error": f"Room {room} holds only {self.rooms[room]} people"}
        problem = self._conflict(date, start, end, room, attendees)
        if problem:
            return {"success": False, "error": problem}
        event_id = f"EV-{self.next_event_number}"
        self.next_event_number += 1
        self.events[event_id] = {"title": title, "date": date, "start": start, "end": end, "room": room,
                                 "attendees": list(attendees), "status": "scheduled"}
        return {"success": True, "message": f"Created {event_id}", "event_id": event_id}

    def move_event(self, event_id: str, date: str, start: str, end: str) -> dict:
        """
        Move an event to a new date and time (same room; same constraints as create_event).
        """
        ev = self.events.get(event_id)
        if ev is None or ev["status"] != "scheduled":
            return {"success": False, "error": f"Event {event_id} not found"}
        problem = self._valid_times(start, end) or self._conflict(date, start, end, ev["room"], ev["attendees"], event_id)
        if problem:
            return {"success": False, "error": problem}
        ev.update({"date": date, "start": start, "end": end})
        return {"success": True, "message": f"Moved {event_id}"}

    def add_attendee(self, event_id: str, person: str) -> dict:
        """
        Invite one more person (room capacity and double-booking rules apply).
        """
        ev = self.events.get(event_id)
        if ev is None or ev["status"] != "scheduled":
            return {"success": False, "error": f"Event {event_id} not found"}
        if person in ev["attendees"]:
            return {"success": False, "error": f"{person} is already invited"}
        if len(ev["attendees"]) + 1 > self.rooms[ev["room"]]:
            return {"success": False, "error": "Room is full"}
        problem = self._conflict(ev["date"], ev["start"], ev["end"], "", [person], event_id)
        if problem:
            return {"success": False, "error": problem}
        ev["attendees"].append(person)
        return {"success": True, "message": f"Added {person} to {event_id}"}

    def cancel_event(self, event_id: str) -> dict:
        """
        Cancel a scheduled event.
        """
        ev = self.events.get(event_id)
        if ev is None or ev["status"] != "scheduled":
            return {"success": False, "error": f"Event {event_id} not found"}
        ev["status"] = "cancelled"
        return {"success": True, "message": f"Cancelled {event_id}"}
