from typing import Dict, List, TypedDict


class BookInfo(TypedDict):
    title: str
    author: str
    copies_total: int
    copies_available: int


class MemberInfo(TypedDict):
    name: str
    fines: float
    max_loans: int


class LibraryCirculation:
    def __init__(self, init_config: dict):
        """
        A public library's circulation desk (lopd's own environment, EnvScaler format).
        """
        # Books: {book_id: BookInfo}
        self.books: Dict[str, BookInfo] = {}
        # Members: {member_id: MemberInfo}
        self.members: Dict[str, MemberInfo] = {}
        # Loans: {loan_id: {"member_id", "book_id", "overdue": bool, "returned": bool}}
        self.loans: Dict[str, dict] = {}
        # Holds: [{"member_id", "book_id"}] in queue order
        self.holds: List[dict] = []
        # Number used for the next loan id (L-<n>)
        self.next_loan_number: int = 1
        self.init_config = init_config

    def _open_loans(self, member_id: str) -> List[str]:
        return [i for i, loan in self.loans.items() if loan["member_id"] == member_id and not loan["returned"]]

    def search_books(self, query: str) -> dict:
        """
        Find books whose title or author contains the query (case-insensitive).
        """
        q = query.lower()
        found = {b: dict(i) for b, i in self.books.items() if q in i["title"].lower() or q in i["author"].lower()}
        return {"success": True, "data": found}

    def get_member(self, member_id: str) -> dict:
        """
        Look up a member with their open loans.
        """
        member = self.members.get(member_id)
        if member is None:
            return {"success": False, "error": f"Member {member_id} not found"}
        loans = {i: dict(self.loans[i]) for i in self._open_loans(member_id)}
        return {"success": True, "data": {**member, "open_loans": loans}}

    def checkout_book(self, member_id: str, book_id: str) -> dict:
        """
        Lend a book to a member.

        Constraints:
            - Members with unpaid fines cannot borrow.
            - At most max_loans open loans per member.
            - A copy must be available.
        """
        member, book = self.members.get(member_id), self.books.get(book_id)
        if member is None or book is None:
            return {"success": False, "error": "Unknown member or book"}
        if member["fines"] > 0:
            return {"success": False, "error": f"Member has unpaid fines of {member['fines']}"}
        if len(self._open_loans(member_id)) >= member["max_loans"]:
            return {"success": False, "error": "Loan limit reached"}
        if book["copies_available"] <= 0:
            return {"success": False, "error": "No copies available; place a hold instead"}
        loan_id = f"L-{self.next_loan_number}"
        self.next_loan_number += 1
        book["copies_available"] -= 1
        self.loans[loan_id] = {"member_id": member_id, "book_id": book_id, "overdue": False, "returned": False}
        return {"success": True, "message": f"Loan {loan_id} created", "loan_id": loan_id}

    def return_book(self, loan_id: str) -> dict:
        """
        Return a loaned book. An overdue return adds a fine of 2.5 to the member.
        """
        loan = self.loans.get(loan_id)
        if loan is None or loan["returned"]:
            return {"success": False, "error": f"No open loan {loan_id}"}
        loan["returned"] = True
        self.books[loan["book_id"]]["copies_available"] += 1
        if loan["overdue"]:
            self.members[loan["member_id"]]["fines"] = round(self.members[loan["member_id"]]["fines"] + 2.5, 2)
        return {"success": True, "message": f"Loan {loan_id} returned"}

    def pay_fine(self, member_id: str, amount: float) -> dict:
        """
        Pay part or all of a member's fines (amount must be positive and not above the fines).
        """
        member = self.members.get(member_id)
        if member is None:
            return {"success": False, "error": f"Member {member_id} not found"}
        if not isinstance(amount, (int, float)) or amount <= 0 or amount > member["fines"]:
            return {"success": False, "error": f"Amount must be between 0 and {member['fines']}"}
        member["fines"] = round(member["fines"] - amount, 2)
        return {"success": True, "message": f"Fines left: {member['fines']}"}

    def place_hold(self, member_id: str, book_id: str) -> dict:
        """
        Queue a hold on a book that has no available copies (one hold per member and book).
        """
        member, book = self.members.get(member_id), self.books.get(book_id)
        if member is None or book is None:
            return {"success": False, "error": "Unknown member or book"}
        if book["copies_available"] > 0:
            return {"success": False, "error": "Copies are available; check the book out instead"}
        if any(h["member_id"] == member_id and h["book_id"] == book_id for h in self.holds):
            return {"success": False, "error": "Hold already placed"}
        self.holds.append({"member_id": member_id, "book_id": book_id})
        return {"success": True, "message": f"Hold placed on {book_id}"}
