from typing import Dict, TypedDict


class EventInfo(TypedDict):
    name: str
    date: str
    capacity: int
    sold: int
    price: float
    status: str  # "on_sale", "cancelled" or "completed"


class EventTicketing:
    def __init__(self, init_config: dict):
        """
        A concert and theatre box office (lopd's own environment, EnvScaler format).
        """
        # Events: {event_id: EventInfo}
        self.events: Dict[str, EventInfo] = {}
        # Customers: {customer_id: {"name": str, "balance": float}}
        self.customers: Dict[str, dict] = {}
        # Tickets: {ticket_id: {"event_id", "customer_id", "status": "valid" | "refunded"}}
        self.tickets: Dict[str, dict] = {}
        # Number used for the next ticket id (T-<n>)
        self.next_ticket_number: int = 1
        self.init_config = init_config

    def list_events(self, status: str = "on_sale") -> dict:
        """
        List events with a status ("on_sale", "cancelled", "completed").
        """
        return {"success": True, "data": {e: dict(i) for e, i in self.events.items() if i["status"] == status}}

    def get_customer(self, customer_id: str) -> dict:
        """
        Look up a customer with their valid tickets.
        """
        customer = self.customers.get(customer_id)
        if customer is None:
            return {"success": False, "error": f"Customer {customer_id} not found"}
        mine = {t: dict(i) for t, i in self.tickets.items() if i["customer_id"] == customer_id and i["status"] == "valid"}
        return {"success": True, "data": {**customer, "tickets": mine}}

    def purchase_tickets(self, customer_id: str, event_id: str, quantity: int) -> dict:
        """
        Buy tickets, paid from the customer's balance.

        Constraints:
            - Only events on sale; 1 to 4 tickets per purchase.
            - Sold tickets may not exceed capacity; the balance must cover quantity * price.
        """
        customer, event = self.customers.get(customer_id), self.events.get(event_id)
        if customer is None or event is None:
            return {"success": False, "error": "Unknown customer or event"}
        if event["status"] != "on_sale":
            return {"success": False, "error": f"Event {event_id} is {event['status']}"}
        if not isinstance(quantity, int) or not 1 <= quantity <= 4:
            return {"success": False, "error": "quantity must be 1 to 4"}
        if event["sold"] + quantity > event["capacity"]:
            return {"success": False, "error": f"Only {event['capacity'] - event['sold']} tickets left"}
        cost = round(quantity * event["price"], 2)
        if cost > customer["balance"]:
            return {"success": False, "error": f"Balance {customer['balance']} does not cover {cost}"}
        customer["balance"] = round(customer["balance"] - cost, 2)
        event["sold"] += quantity
        ids = []
        for _ in range(quantity):
            ticket_id = f"T-{self.next_ticket_number}"
            self.next_ticket_number += 1
            self.tickets[ticket_id] = {"event_id": event_id, "customer_id": customer_id, "status": "valid"}
            ids.append(ticket_id)
        return {"success": True, "message": f"Bought {quantity} for {cost}", "ticket_ids": ids}

    def refund_ticket(self, ticket_id: str) -> dict:
        """
        Refund one valid ticket: the price returns to the buyer's balance.
        Tickets of completed events cannot be refunded.
        """
        ticket = self.tickets.get(ticket_id)
        if ticket is None or ticket["status"] != "valid":
            return {"success": False, "error": f"No valid ticket {ticket_id}"}
        event = self.events[ticket["event_id"]]
        if event["status"] == "completed":
            return {"success": False, "error": "The event has already taken place"}
        ticket["status"] = "refunded"
        event["sold"] -= 1
        customer = self.customers[ticket["customer_id"]]
        customer["balance"] = round(customer["balance"] + event["price"], 2)
        return {"success": True, "message": f"Refunded {ticket_id}"}

    def transfer_ticket(self, ticket_id: str, to_customer_id: str) -> dict:
        """
        Give a valid ticket of an on-sale event to another customer.
        """
        ticket = self.tickets.get(ticket_id)
        if ticket is None or ticket["status"] != "valid":
            return {"success": False, "error": f"No valid ticket {ticket_id}"}
        if to_customer_id not in self.customers or to_customer_id == ticket["customer_id"]:
            return {"success": False, "error": "Invalid recipient"}
        if self.events[ticket["event_id"]]["status"] != "on_sale":
            return {"success": False, "error": "Only tickets of events on sale can be transferred"}
        ticket["customer_id"] = to_customer_id
        return {"success": True, "message": f"{ticket_id} now belongs to {to_customer_id}"}

    def top_up_balance(self, customer_id: str, amount: float) -> dict:
        """
        Add money to a customer's balance (1 to 500 per top-up).
        """
        customer = self.customers.get(customer_id)
        if customer is None:
            return {"success": False, "error": f"Customer {customer_id} not found"}
        if not isinstance(amount, (int, float)) or not 1 <= amount <= 500:
            return {"success": False, "error": "amount must be between 1 and 500"}
        customer["balance"] = round(customer["balance"] + amount, 2)
        return {"success": True, "message": f"Balance is now {customer['balance']}"}
