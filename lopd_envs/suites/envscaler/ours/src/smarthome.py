from typing import Dict, List, Optional, TypedDict


class DeviceInfo(TypedDict):
    kind: str  # "light", "thermostat", "lock", "plug"
    room: str
    power: str  # "on" or "off"
    settings: dict


class SmartHome:
    def __init__(self, init_config: dict):
        """
        A smart-home hub (lopd's own environment, EnvScaler format).
        """
        # Devices: {device_id: DeviceInfo}
        self.devices: Dict[str, DeviceInfo] = {}
        # House mode: "home" or "away"
        self.mode: str = "home"
        # The door PIN
        self.pin: str = ""
        # Log of successful changes: [str]
        self.log: List[str] = []
        self.init_config = init_config

    def list_devices(self, room: Optional[str] = None) -> dict:
        """
        List devices, optionally those of one room.
        """
        found = {d: dict(i) for d, i in self.devices.items() if room is None or i["room"] == room}
        return {"success": True, "data": found}

    def get_device(self, device_id: str) -> dict:
        """
        Look up one device.
        """
        device = self.devices.get(device_id)
        if device is None:
            return {"success": False, "error": f"Device {device_id} not found"}
        return {"success": True, "data": dict(device)}

    def set_power(self, device_id: str, power: str) -> dict:
        """
        Turn a light, thermostat or plug "on" or "off" (locks have no power switch).
        """
        device = self.devices.get(device_id)
        if device is None:
            return {"success": False, "error": f"Device {device_id} not found"}
        if device["kind"] == "lock":
            return {"success": False, "error": "Locks cannot be switched"}
        if power not in ("on", "off"):
            return {"success": False, "error": "power must be 'on' or 'off'"}
        device["power"] = power
        self.log.append(f"{device_id} power {power}")
        return {"success": True, "message": f"{device_id} is {power}"}

    def set_thermostat(self, device_id: str, temperature: int) -> dict:
        """
        Set a thermostat's target temperature (16 to 28 degrees; the thermostat must be on).
        """
        device = self.devices.get(device_id)
        if device is None or device["kind"] != "thermostat":
            return {"success": False, "error": f"{device_id} is not a thermostat"}
        if device["power"] != "on":
            return {"success": False, "error": "Thermostat is off"}
        if not isinstance(temperature, (int, float)) or not 16 <= temperature <= 28:
            return {"success": False, "error": "Temperature must be between 16 and 28"}
        device["settings"]["target"] = temperature
        self.log.append(f"{device_id} target {temperature}")
        return {"success": True, "message": f"{device_id} set to {temperature}"}

    def set_brightness(self, device_id: str, brightness: int) -> dict:
        """
        Set a light's brightness (0 to 100; the light must be on).
        """
        device = self.devices.get(device_id)
        if device is None or device["kind"] != "light":
            return {"success": False, "error": f"{device_id} is not a light"}
        if device["power"] != "on":
            return {"success": False, "error": "Light is off"}
        if not isinstance(brightness, int) or not 0 <= brightness <= 100:
            return {"success": False, "error": "Brightness must be an integer 0 to 100"}
        device["settings"]["brightness"] = brightness
        self.log.append(f"{device_id} brightness {brightness}")
        return {"success": True, "message": f"{device_id} brightness {brightness}"}

    def lock_door(self, device_id: str) -> dict:
        """
        Lock a door lock.
        """
        device = self.devices.get(device_id)
        if device is None or device["kind"] != "lock":
            return {"success": False, "error": f"{device_id} is not a lock"}
        device["settings"]["locked"] = True
        self.log.append(f"{device_id} locked")
        return {"success": True, "message": f"{device_id} locked"}

    def unlock_door(self, device_id: str, pin: str) -> dict:
        """
        Unlock a door lock with the house PIN. Not allowed while the house is in "away" mode.
        """
        device = self.devices.get(device_id)
        if device is None or device["kind"] != "lock":
            return {"success": False, "error": f"{device_id} is not a lock"}
        if self.mode == "away":
            return {"success": False, "error": "Doors cannot be unlocked in away mode"}
        if pin != self.pin:
            return {"success": False, "error": "Wrong PIN"}
        device["settings"]["locked"] = False
        self.log.append(f"{device_id} unlocked")
        return {"success": True, "message": f"{device_id} unlocked"}

    def set_mode(self, mode: str) -> dict:
        """
        Set the house mode to "home" or "away". Switching to away requires every lock to be locked.
        """
        if mode not in ("home", "away"):
            return {"success": False, "error": "mode must be 'home' or 'away'"}
        if mode == "away":
            open_locks = [d for d, i in self.devices.items() if i["kind"] == "lock" and not i["settings"].get("locked")]
            if open_locks:
                return {"success": False, "error": f"Lock these first: {', '.join(open_locks)}"}
        self.mode = mode
        self.log.append(f"mode {mode}")
        return {"success": True, "message": f"Mode is {mode}"}
