from typing import Dict, List, TypedDict


class AccountInfo(TypedDict):
    account_id: str
    owner: str
    balance: float
    status: str  # "active" or "frozen"
    daily_limit: float


class TransactionInfo(TypedDict):
    kind: str
    account_id: str
    amount: float
    counterparty: str


class BankLedger:
    def __init__(self, init_config: dict):
        """
        A retail bank ledger (lopd's own environment, EnvScaler format).
        init_config: {"accounts": {account_id: AccountInfo}, "transactions": [TransactionInfo],
                      "transferred_today": {account_id: float}}
        """
        # Accounts: {account_id: AccountInfo}
        self.accounts: Dict[str, AccountInfo] = {}
        # Ledger of successful operations, oldest first
        self.transactions: List[TransactionInfo] = []
        # Amount already sent today per account (for the daily transfer limit)
        self.transferred_today: Dict[str, float] = {}
        self.init_config = init_config

    def _refuse(self, account_id: str, amount: float) -> dict:
        """The failure result when the account is unknown or frozen or the amount is not positive, else {}."""
        account = self.accounts.get(account_id)
        if account is None:
            return {"success": False, "error": f"Account {account_id} does not exist"}
        if not isinstance(amount, (int, float)) or amount <= 0:
            return {"success": False, "error": "Amount must be a positive number"}
        if account["status"] != "active":
            return {"success": False, "error": f"Account {account_id} is frozen"}
        return {}

    def get_account(self, account_id: str) -> dict:
        """
        Look up one account.

        Args:
            account_id (str): The account identifier, e.g. "ACC-100".

        Returns:
            dict: {"success": True, "data": AccountInfo} or {"success": False, "error": str}
        """
        account = self.accounts.get(account_id)
        if account is None:
            return {"success": False, "error": f"Account {account_id} does not exist"}
        return {"success": True, "data": dict(account)}

    def list_accounts_by_owner(self, owner: str) -> dict:
        """
        List the accounts held by a customer.

        Args:
            owner (str): The customer's full name (exact match).

        Returns:
            dict: {"success": True, "data": List[AccountInfo]} (may be empty)
        """
        found = [dict(a) for a in self.accounts.values() if a["owner"] == owner]
        return {"success": True, "data": found}

    def deposit(self, account_id: str, amount: float) -> dict:
        """
        Deposit money into an active account.

        Args:
            account_id (str): The account to credit.
            amount (float): A positive amount.

        Returns:
            dict: {"success": True, "message": str} or {"success": False, "error": str}

        Constraints:
            - The amount must be positive.
            - Frozen accounts accept no deposits.
        """
        problem = self._refuse(account_id, amount)
        if problem:
            return problem
        account = self.accounts[account_id]
        account["balance"] = round(account["balance"] + amount, 2)
        self.transactions.append({"kind": "deposit", "account_id": account_id, "amount": amount, "counterparty": ""})
        return {"success": True, "message": f"Deposited {amount} into {account_id}"}

    def withdraw(self, account_id: str, amount: float) -> dict:
        """
        Withdraw money from an active account.

        Args:
            account_id (str): The account to debit.
            amount (float): A positive amount not above the balance.

        Returns:
            dict: {"success": True, "message": str} or {"success": False, "error": str}

        Constraints:
            - No overdraft: the balance may not go below zero.
            - Frozen accounts allow no withdrawals.
        """
        problem = self._refuse(account_id, amount)
        if problem:
            return problem
        account = self.accounts[account_id]
        if amount > account["balance"]:
            return {"success": False, "error": "Insufficient funds"}
        account["balance"] = round(account["balance"] - amount, 2)
        self.transactions.append({"kind": "withdrawal", "account_id": account_id, "amount": amount, "counterparty": ""})
        return {"success": True, "message": f"Withdrew {amount} from {account_id}"}

    def transfer(self, from_account: str, to_account: str, amount: float) -> dict:
        """
        Move money between two active accounts.

        Args:
            from_account (str): The account to debit.
            to_account (str): The account to credit (must differ from from_account).
            amount (float): A positive amount.

        Returns:
            dict: {"success": True, "message": str} or {"success": False, "error": str}

        Constraints:
            - Both accounts must exist and be active.
            - No overdraft.
            - The sender's transfers today may not exceed its daily_limit in total.
        """
        src, dst = self.accounts.get(from_account), self.accounts.get(to_account)
        if src is None or dst is None:
            return {"success": False, "error": "Both accounts must exist"}
        if from_account == to_account:
            return {"success": False, "error": "Cannot transfer to the same account"}
        if not isinstance(amount, (int, float)) or amount <= 0:
            return {"success": False, "error": "Amount must be a positive number"}
        if src["status"] != "active" or dst["status"] != "active":
            return {"success": False, "error": "Both accounts must be active"}
        if amount > src["balance"]:
            return {"success": False, "error": "Insufficient funds"}
        sent = self.transferred_today.get(from_account, 0)
        if sent + amount > src["daily_limit"]:
            return {"success": False, "error": f"Daily transfer limit exceeded ({src['daily_limit'] - sent} left today)"}
        src["balance"] = round(src["balance"] - amount, 2)
        dst["balance"] = round(dst["balance"] + amount, 2)
        self.transferred_today[from_account] = sent + amount
        self.transactions.append({"kind": "transfer", "account_id": from_account, "amount": amount,
                                  "counterparty": to_account})
        return {"success": True, "message": f"Transferred {amount} from {from_account} to {to_account}"}

    def freeze_account(self, account_id: str) -> dict:
        """
        Freeze an account (for example after a reported card loss).

        Args:
            account_id (str): The account to freeze.

        Returns:
            dict: {"success": True, "message": str} or {"success": False, "error": str}
        """
        account = self.accounts.get(account_id)
        if account is None:
            return {"success": False, "error": f"Account {account_id} does not exist"}
        if account["status"] == "frozen":
            return {"success": False, "error": f"Account {account_id} is already frozen"}
        account["status"] = "frozen"
        return {"success": True, "message": f"Account {account_id} frozen"}

    def unfreeze_account(self, account_id: str, verification_code: str) -> dict:
        """
        Unfreeze an account; needs the customer's verification code.

        Args:
            account_id (str): The frozen account.
            verification_code (str): The code on file for the account owner.

        Returns:
            dict: {"success": True, "message": str} or {"success": False, "error": str}
        """
        account = self.accounts.get(account_id)
        if account is None:
            return {"success": False, "error": f"Account {account_id} does not exist"}
        if account["status"] != "frozen":
            return {"success": False, "error": f"Account {account_id} is not frozen"}
        if verification_code != account.get("verification_code"):
            return {"success": False, "error": "Verification code does not match"}
        account["status"] = "active"
        return {"success": True, "message": f"Account {account_id} unfrozen"}
