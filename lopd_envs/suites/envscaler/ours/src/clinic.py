from typing import Dict, Optional, TypedDict


class SlotInfo(TypedDict):
    doctor_id: str
    date: str
    time: str
    status: str  # "open", "booked" or "blocked"


class AppointmentInfo(TypedDict):
    patient_id: str
    slot_id: str
    reason: str
    status: str  # "booked" or "cancelled"


class ClinicScheduler:
    def __init__(self, init_config: dict):
        """
        An outpatient clinic's booking system (lopd's own environment, EnvScaler format).
        """
        # Doctors: {doctor_id: {"name": str, "specialty": str}}
        self.doctors: Dict[str, dict] = {}
        # Slots: {slot_id: SlotInfo}
        self.slots: Dict[str, SlotInfo] = {}
        # Patients: {patient_id: {"name": str, "insurance_active": bool}}
        self.patients: Dict[str, dict] = {}
        # Appointments: {appointment_id: AppointmentInfo}
        self.appointments: Dict[str, AppointmentInfo] = {}
        # Number used for the next appointment id (APT-<n>)
        self.next_appointment_number: int = 1
        self.init_config = init_config

    def find_doctors(self, specialty: str) -> dict:
        """
        List doctors of a specialty (case-insensitive), e.g. "dermatology".

        Returns:
            dict: {"success": True, "data": {doctor_id: {"name", "specialty"}}}
        """
        found = {d: dict(info) for d, info in self.doctors.items() if info["specialty"].lower() == specialty.lower()}
        return {"success": True, "data": found}

    def list_open_slots(self, doctor_id: str, date: Optional[str] = None) -> dict:
        """
        List a doctor's open slots, optionally on one date ("YYYY-MM-DD").

        Returns:
            dict: {"success": True, "data": {slot_id: SlotInfo}} or {"success": False, "error": str}
        """
        if doctor_id not in self.doctors:
            return {"success": False, "error": f"Doctor {doctor_id} not found"}
        found = {s: dict(info) for s, info in self.slots.items()
                 if info["doctor_id"] == doctor_id and info["status"] == "open" and (date is None or info["date"] == date)}
        return {"success": True, "data": found}

    def get_patient(self, patient_id: str) -> dict:
        """
        Look up a patient and their appointments.

        Returns:
            dict: {"success": True, "data": {"name", "insurance_active", "appointments": {...}}}
        """
        patient = self.patients.get(patient_id)
        if patient is None:
            return {"success": False, "error": f"Patient {patient_id} not found"}
        mine = {a: dict(info) for a, info in self.appointments.items() if info["patient_id"] == patient_id}
        return {"success": True, "data": {**patient, "appointments": mine}}

    def book_slot(self, slot_id: str, patient_id: str, reason: str) -> dict:
        """
        Book an open slot for a patient.

        Args:
            slot_id (str): An open slot.
            patient_id (str): The patient.
            reason (str): Reason for the visit (non-empty).

        Constraints:
            - Only open slots can be booked.
            - The patient's insurance must be active.
            - A patient may hold at most one booked appointment per date.
        """
        slot, patient = self.slots.get(slot_id), self.patients.get(patient_id)
        if slot is None or patient is None:
            return {"success": False, "error": "Unknown slot or patient"}
        if slot["status"] != "open":
            return {"success": False, "error": f"Slot {slot_id} is not open"}
        if not patient["insurance_active"]:
            return {"success": False, "error": "Patient insurance is not active"}
        if not reason:
            return {"success": False, "error": "A reason is required"}
        for info in self.appointments.values():
            if (info["patient_id"] == patient_id and info["status"] == "booked"
                    and self.slots[info["slot_id"]]["date"] == slot["date"]):
                return {"success": False, "error": "Patient already has an appointment that day"}
        appointment_id = f"APT-{self.next_appointment_number}"
        self.next_appointment_number += 1
        self.appointments[appointment_id] = {"patient_id": patient_id, "slot_id": slot_id, "reason": reason,
                                             "status": "booked"}
        slot["status"] = "booked"
        return {"success": True, "message": f"Booked {appointment_id}", "appointment_id": appointment_id}

    def cancel_appointment(self, appointment_id: str) -> dict:
        """
        Cancel a booked appointment; its slot opens again.
        """
        info = self.appointments.get(appointment_id)
        if info is None:
            return {"success": False, "error": f"Appointment {appointment_id} not found"}
        if info["status"] != "booked":
            return {"success": False, "error": "Appointment is not booked"}
        info["status"] = "cancelled"
        self.slots[info["slot_id"]]["status"] = "open"
        return {"success": True, "message": f"Cancelled {appointment_id}"}

    def reschedule_appointment(self, appointment_id: str, new_slot_id: str) -> dict:
        """
        Move a booked appointment to another open slot of the same doctor.
        """
        info = self.appointments.get(appointment_id)
        new = self.slots.get(new_slot_id)
        if info is None or info["status"] != "booked":
            return {"success": False, "error": "No such booked appointment"}
        if new is None or new["status"] != "open":
            return {"success": False, "error": f"Slot {new_slot_id} is not open"}
        old = self.slots[info["slot_id"]]
        if new["doctor_id"] != old["doctor_id"]:
            return {"success": False, "error": "Rescheduling must keep the same doctor"}
        old["status"] = "open"
        new["status"] = "booked"
        info["slot_id"] = new_slot_id
        return {"success": True, "message": f"{appointment_id} moved to {new_slot_id}"}
