from typing import Dict, List, TypedDict


class FileInfo(TypedDict):
    owner: str
    content: str
    locked: bool
    tags: List[str]


class FileStore:
    def __init__(self, init_config: dict):
        """
        A shared document store with quotas and a trash folder (lopd's own environment, EnvScaler format).
        """
        # Files: {path: FileInfo}
        self.files: Dict[str, FileInfo] = {}
        # Users: {name: {"quota": int}}; usage is the total length of the contents they own
        self.users: Dict[str, dict] = {}
        # Deleted files: {path: FileInfo}
        self.trash: Dict[str, FileInfo] = {}
        self.init_config = init_config

    def _used(self, owner: str) -> int:
        return sum(len(f["content"]) for f in self.files.values() if f["owner"] == owner)

    def list_files(self, prefix: str) -> dict:
        """
        List the paths that start with prefix (e.g. "/reports/"), with owner, lock state and tags.
        """
        found = {p: {"owner": f["owner"], "locked": f["locked"], "tags": list(f["tags"]), "size": len(f["content"])}
                 for p, f in self.files.items() if p.startswith(prefix)}
        return {"success": True, "data": found}

    def read_file(self, path: str) -> dict:
        """
        Read one file's content.
        """
        f = self.files.get(path)
        if f is None:
            return {"success": False, "error": f"{path} does not exist"}
        return {"success": True, "data": f["content"]}

    def write_file(self, path: str, content: str, owner: str) -> dict:
        """
        Create or overwrite a file.

        Constraints:
            - Locked files cannot be overwritten; only the owner may overwrite a file.
            - The owner's total stored characters may not exceed their quota.
        """
        if owner not in self.users:
            return {"success": False, "error": f"Unknown user {owner}"}
        existing = self.files.get(path)
        if existing is not None:
            if existing["locked"]:
                return {"success": False, "error": f"{path} is locked"}
            if existing["owner"] != owner:
                return {"success": False, "error": f"{path} belongs to {existing['owner']}"}
        used = self._used(owner) - (len(existing["content"]) if existing else 0)
        if used + len(content) > self.users[owner]["quota"]:
            return {"success": False, "error": "Quota exceeded"}
        tags = list(existing["tags"]) if existing else []
        self.files[path] = {"owner": owner, "content": content, "locked": False, "tags": tags}
        return {"success": True, "message": f"Wrote {path}"}

    def rename_file(self, path: str, new_path: str) -> dict:
        """
        Rename (move) a file. The target path must be free and the file unlocked.
        """
        f = self.files.get(path)
        if f is None:
            return {"success": False, "error": f"{path} does not exist"}
        if f["locked"]:
            return {"success": False, "error": f"{path} is locked"}
        if new_path in self.files:
            return {"success": False, "error": f"{new_path} already exists"}
        self.files[new_path] = self.files.pop(path)
        return {"success": True, "message": f"Renamed {path} to {new_path}"}

    def delete_file(self, path: str) -> dict:
        """
        Move a file to the trash. Locked files cannot be deleted.
        """
        f = self.files.get(path)
        if f is None:
            return {"success": False, "error": f"{path} does not exist"}
        if f["locked"]:
            return {"success": False, "error": f"{path} is locked"}
        self.trash[path] = self.files.pop(path)
        return {"success": True, "message": f"{path} moved to trash"}

    def restore_file(self, path: str) -> dict:
        """
        Restore a file from the trash to its original path (which must be free).
        """
        if path not in self.trash:
            return {"success": False, "error": f"{path} is not in the trash"}
        if path in self.files:
            return {"success": False, "error": f"{path} already exists"}
        self.files[path] = self.trash.pop(path)
        return {"success": True, "message": f"Restored {path}"}

    def set_lock(self, path: str, locked: bool) -> dict:
        """
        Lock (locked=true) or unlock (locked=false) a file.
        """
        f = self.files.get(path)
        if f is None:
            return {"success": False, "error": f"{path} does not exist"}
        f["locked"] = bool(locked)
        return {"success": True, "message": f"{path} {'locked' if locked else 'unlocked'}"}

    def add_tag(self, path: str, tag: str) -> dict:
        """
        Add a tag to a file (no duplicates; tags are lower-case words).
        """
        f = self.files.get(path)
        if f is None:
            return {"success": False, "error": f"{path} does not exist"}
        if not tag or tag != tag.lower() or " " in tag:
            return {"success": False, "error": "Tags must be lower-case words"}
        if tag in f["tags"]:
            return {"success": False, "error": f"{path} already has tag {tag}"}
        f["tags"].append(tag)
        return {"success": True, "message": f"Tagged {path} with {tag}"}
