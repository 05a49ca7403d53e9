"""Write lopd's own EnvScaler data in the official file format (run: ``python -m lopd_envs.suites.envscaler.ours.build``).

Inputs: the environment classes in ``src/`` (plain Python, one class each) with the descriptions in
:data:`ENVIRONMENTS`, and the scenarios of :mod:`.scenarios`. Outputs, next to this file:

* ``lopd_ours_env_metadata.json``: a dict keyed ``env_1`` … ``env_8``, each environment with the fields
  of EnvScaler's ``191_env_metadata.json`` (``tools`` built from the methods' signatures and docstrings
  the way EnvScaler's skeleton builder does: one OpenAI function per public method, parameters without
  a default are required, ``Optional[...]`` adds ``null``);
* ``lopd_ours_rl_scenario_metadata.json``: a list of scenarios with the fields of EnvScaler's RL
  scenario file (``checklist`` and ``checklist_with_func`` with ``def check_func(final_state)``);
* ``lopd_ours_solutions.json`` (ours only, not an EnvScaler file): per task id the scripted solution,
  a partial solution, the indices of the checks that hold at reset and after the partial solution, and
  the scripted user's lines for conversational mode;
* ``splits.json``: the ``eval`` task ids.

Before writing, every scenario is replayed in-process on these trusted classes: the solution must pass
every check and the annotated reset / partial verdicts must be exactly right (a wrong annotation stops
the build). ``--check`` only verifies that the files on disk equal what would be written.
"""

from __future__ import annotations

import ast
import copy
import json
import sys
import types
from pathlib import Path
from typing import Any

from lopd_envs.suites.envscaler.ours.scenarios import EVAL_IDS, scenarios

HERE = Path(__file__).parent
STOP = "###STOP###"

ENVIRONMENTS: dict[str, dict[str, Any]] = {
    "env_1": dict(
        source="bank.py", summary="Retail bank ledger (lopd)",
        introduction="lopd's own bank environment: customer accounts with balances, frozen/active status and a daily "
                     "transfer limit, plus a ledger of every deposit, withdrawal and transfer.",
        entities=[("Account", "account_id, owner, balance, status, daily_limit, verification_code", "A customer account."),
                  ("Transaction", "kind, account_id, amount, counterparty", "A successful money movement.")],
        rules=["Amounts must be positive.", "No account may go below a zero balance.",
               "Frozen accounts can neither send nor receive money.",
               "The total transferred from an account in a day may not exceed its daily_limit.",
               "Unfreezing an account requires the owner's verification code."]),
    "env_2": dict(
        source="clinic.py", summary="Outpatient clinic booking (lopd)",
        introduction="lopd's own clinic environment: doctors with specialties, time slots, patients with insurance "
                     "status, and appointments that occupy slots.",
        entities=[("Doctor", "doctor_id, name, specialty", "A doctor who offers slots."),
                  ("Slot", "slot_id, doctor_id, date, time, status", "A bookable time of one doctor."),
                  ("Patient", "patient_id, name, insurance_active", "A registered patient."),
                  ("Appointment", "appointment_id, patient_id, slot_id, reason, status", "A booking of a slot.")],
        rules=["Only open slots can be booked.", "Patients without active insurance cannot book.",
               "A patient may hold at most one booked appointment per date.",
               "Cancelling an appointment opens its slot again.", "Rescheduling keeps the same doctor."]),
    "env_3": dict(
        source="inventory.py", summary="Warehouse inventory (lopd)",
        introduction="lopd's own warehouse environment: stock items with reorder levels and locations, customer orders, "
                     "stock adjustments and supplier restock requests.",
        entities=[("Item", "sku, name, quantity, reorder_level, location", "A stocked product."),
                  ("Order", "order_id, sku, quantity, status", "A customer order."),
                  ("RestockRequest", "sku, quantity", "A request to the supplier.")],
        rules=["Stock can never become negative.", "Only pending orders can be fulfilled or cancelled.",
               "A restock may be requested only when quantity is at or below the reorder level, once per SKU.",
               "Items may only be moved to valid locations.", "Every manual stock adjustment needs a reason."]),
    "env_4": dict(
        source="filestore.py", summary="Shared document store (lopd)",
        introduction="lopd's own file store: files with owners, locks and tags, per-user quotas, and a trash folder.",
        entities=[("File", "path, owner, content, locked, tags", "A stored document."),
                  ("User", "name, quota", "A user with a character quota.")],
        rules=["Locked files cannot be overwritten, renamed or deleted.", "Only the owner may overwrite a file.",
               "A user's stored characters may not exceed the quota.", "Deleting moves a file to the trash.",
               "A rename or restore target path must be free.", "Tags are unique lower-case words."]),
    "env_5": dict(
        source="team_calendar.py", summary="Team calendar with rooms (lopd)",
        introduction="lopd's own calendar environment: meetings with attendees in rooms of limited capacity.",
        entities=[("Event", "event_id, title, date, start, end, room, attendees, status", "A meeting."),
                  ("Room", "name, capacity", "A meeting room.")],
        rules=["Events run within 08:00-18:00 and start before they end.",
               "A room hosts one event at a time and at most its capacity of attendees.",
               "Nobody may attend two overlapping events."]),
    "env_6": dict(
        source="library.py", summary="Library circulation desk (lopd)",
        introduction="lopd's own library environment: books with copies, members with fines and loan limits, loans and holds.",
        entities=[("Book", "book_id, title, author, copies_total, copies_available", "A title in the catalogue."),
                  ("Member", "member_id, name, fines, max_loans", "A library member."),
                  ("Loan", "loan_id, member_id, book_id, overdue, returned", "A lent copy.")],
        rules=["Members with unpaid fines cannot borrow.", "A member may hold at most max_loans open loans.",
               "Holds are only for books without available copies.", "Returning an overdue loan adds a fine of 2.5."]),
    "env_7": dict(
        source="ticketing.py", summary="Event box office (lopd)",
        introduction="lopd's own ticketing environment: events with capacity and price, customers with prepaid balances, "
                     "and tickets that can be refunded or transferred.",
        entities=[("Event", "event_id, name, date, capacity, sold, price, status", "A show."),
                  ("Customer", "customer_id, name, balance", "A buyer with a prepaid balance."),
                  ("Ticket", "ticket_id, event_id, customer_id, status", "One seat.")],
        rules=["Only events on sale sell tickets, 1 to 4 per purchase, within capacity.",
               "The balance must cover the purchase.", "Tickets of completed events cannot be refunded.",
               "Only tickets of events on sale can be transferred.", "A top-up is between 1 and 500."]),
    "env_8": dict(
        source="smarthome.py", summary="Smart-home hub (lopd)",
        introduction="lopd's own smart-home environment: lights, a thermostat, plugs and door locks, a house mode and a PIN.",
        entities=[("Device", "device_id, kind, room, power, settings", "A connected device."),
                  ("House", "mode, pin, log", "House-wide state.")],
        rules=["Thermostat targets are 16 to 28 degrees and need the thermostat on.",
               "Brightness is 0 to 100 and needs the light on.",
               "Unlocking needs the PIN and is not allowed in away mode.",
               "Away mode needs every lock locked."]),
}

_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean", "dict": "object", "list": "array",
          "Any": None}


def json_type(annotation: ast.AST | None) -> tuple[dict[str, Any], bool]:
    """(schema, optional) of a parameter annotation, following EnvScaler's conversion of type hints."""
    if annotation is None:
        return {}, False
    if isinstance(annotation, ast.Subscript) and isinstance(annotation.value, ast.Name):
        base = annotation.value.id
        if base == "Optional":
            inner, _ = json_type(annotation.slice)
            kind = inner.get("type")
            return {**inner, "type": [kind, "null"] if isinstance(kind, str) else ["null"]}, True
        if base == "List":
            inner, _ = json_type(annotation.slice)
            return {"type": "array", "items": inner}, False
        if base == "Dict":
            return {"type": "object"}, False
    if isinstance(annotation, ast.Name) and annotation.id in _TYPES:
        kind = _TYPES[annotation.id]
        return ({"type": kind} if kind else {}), False
    return {"type": "object"}, False


def tools_of(source: str, class_name: str) -> list[dict[str, Any]]:
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == class_name)
    tools = []
    for node in cls.body:
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
            continue
        params = [a for a in node.args.args if a.arg != "self"]
        defaults = [None] * (len(params) - len(node.args.defaults)) + list(node.args.defaults)
        props, required = {}, []
        for arg, default in zip(params, defaults):
            schema, optional = json_type(arg.annotation)
            if schema.get("type") == "array" and "items" not in schema:
                schema["items"] = {}
            props[arg.arg] = schema
            if not optional and default is None:
                required.append(arg.arg)
        tools.append({"type": "function", "function": {
            "name": node.name, "description": ast.get_docstring(node) or "",
            "parameters": {"type": "object", "properties": props, "required": required}}})
    return tools


def class_def(source: str, class_name: str) -> str:
    """The source up to the end of ``__init__`` (EnvScaler's ``env_class_def``)."""
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    return "\n".join(source.splitlines()[:init.end_lineno]) + "\n"


def structure(source: str, class_name: str) -> str:
    """A short text map of the class (EnvScaler's ``env_structure``): state attributes and methods."""
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == class_name)
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    attrs = [t.target.attr for t in ast.walk(init) if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Attribute)]
    methods = [n.name for n in cls.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")]
    return f"class {class_name}\n  state: {', '.join(attrs)}\n  methods: {', '.join(methods)}\n"


def environment(env_id: str, spec: dict[str, Any]) -> dict[str, Any]:
    source = (HERE / "src" / spec["source"]).read_text(encoding="utf-8")
    name = next(n.name for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and
                any(isinstance(m, ast.FunctionDef) and m.name == "__init__" for m in n.body))
    tools = tools_of(source, name)
    operations = [{"operation_name": t["function"]["name"],
                   "operation_description": t["function"]["description"].split("\n\n")[0].strip(),
                   "operation_type": "query" if t["function"]["name"].startswith(("get_", "list_", "search_", "find_"))
                   else "state_change"} for t in tools]
    return {"env_id": env_id, "environment_summary": spec["summary"], "environment_introduction": spec["introduction"],
            "state_space_definition": [{"entity": e, "attributes": a, "description": d} for e, a, d in spec["entities"]],
            "constraints_rules": list(spec["rules"]), "operation_list": operations, "env_class_name": name,
            "env_class_code": source, "env_class_def": class_def(source, name), "env_structure": structure(source, name),
            "tools": tools}


def check_source(body: str) -> str:
    lines = body.strip().splitlines()
    return "def check_func(final_state):\n" + "\n".join("    " + line for line in lines) + "\n"


def build() -> dict[str, Any]:
    envs = {env_id: environment(env_id, spec) for env_id, spec in ENVIRONMENTS.items()}
    rows, solutions = [], {}
    for sc in scenarios():
        env = envs[sc["env"]]
        checks = [{"check_item": item, "check_func": check_source(body)} for item, body in sc["checks"]]
        rows.append({"env_id": sc["env"], "env_class_name": env["env_class_name"], "task_id": sc["id"],
                     "init_config": sc["init"], "task": sc["task"], "checklist": [c["check_item"] for c in checks],
                     "checklist_with_func": checks})
        solutions[sc["id"]] = {"calls": sc["solution"], "partial_calls": sc["partial"], "true_at_reset": sc["reset"],
                               "true_after_partial": sc["part"], "user_lines": sc.get("user") or [sc["task"], STOP]}
    return {"lopd_ours_env_metadata.json": envs, "lopd_ours_rl_scenario_metadata.json": rows,
            "lopd_ours_solutions.json": solutions, "splits.json": {"eval": list(EVAL_IDS)}}


# ------------------------------------------------------------------ in-process verification (trusted classes)

def _instance(env: dict[str, Any], init: Any) -> Any:
    module = types.ModuleType("dynamic_env")
    exec(compile(env["env_class_code"], env["env_id"], "exec"), module.__dict__)
    obj = getattr(module, env["env_class_name"])(copy.deepcopy(init))
    for key, value in copy.deepcopy(init).items():
        setattr(obj, key, value)
    return obj


def _state(obj: Any) -> dict[str, Any]:
    return copy.deepcopy({k: v for k, v in vars(obj).items() if not (k.startswith("__") and k.endswith("__"))})


def verdicts(row: dict[str, Any], initial: dict[str, Any], final: dict[str, Any]) -> list[bool]:
    out = []
    for item in row["checklist_with_func"]:
        namespace: dict[str, Any] = {"initial_state": copy.deepcopy(initial)}
        exec(item["check_func"], namespace)
        try:
            result = namespace["check_func"](copy.deepcopy(final))
        except Exception:  # noqa: BLE001 - a failing check is a failed check
            result = False
        out.append(result is True)
    return out


def replay(env: dict[str, Any], row: dict[str, Any], calls: list[dict[str, Any]]) -> list[bool]:
    obj = _instance(env, row["init_config"])
    initial = _state(obj)
    for c in calls:
        getattr(obj, c["name"])(**c["arguments"])
    return verdicts(row, initial, _state(obj))


def verify(files: dict[str, Any]) -> list[str]:
    envs, problems = files["lopd_ours_env_metadata.json"], []
    for row in files["lopd_ours_rl_scenario_metadata.json"]:
        sol, env = files["lopd_ours_solutions.json"][row["task_id"]], envs[row["env_id"]]
        names = {t["function"]["name"] for t in env["tools"]}
        for c in sol["calls"] + sol["partial_calls"]:
            if c["name"] not in names:
                problems.append(f"{row['task_id']}: unknown tool {c['name']}")
        for label, calls, expected in (("solution", sol["calls"], list(range(len(row["checklist"])))),
                                       ("reset", [], sol["true_at_reset"]),
                                       ("partial", sol["partial_calls"], sol["true_after_partial"])):
            got = [i for i, ok in enumerate(replay(env, row, calls)) if ok]
            if got != sorted(expected):
                problems.append(f"{row['task_id']}: {label} passes checks {got}, annotated {sorted(expected)}")
    return problems


def render(content: Any) -> str:
    return json.dumps(content, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    files = build()
    problems = verify(files)
    if problems:
        print("\n".join(problems))
        return 1
    if "--check" in argv:
        stale = [name for name, content in files.items() if (HERE / name).read_text(encoding="utf-8") != render(content)]
        print("stale: " + ", ".join(stale) if stale else "up to date")
        return 1 if stale else 0
    for name, content in files.items():
        (HERE / name).write_text(render(content), encoding="utf-8")
    print(f"wrote {len(files)} files: {len(files['lopd_ours_env_metadata.json'])} environments, "
          f"{len(files['lopd_ours_rl_scenario_metadata.json'])} scenarios")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
