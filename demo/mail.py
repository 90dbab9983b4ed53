"""Mail given to the transport while something else runs (a move), and the check that each
message arrived once, wherever its mailbox is by then."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from dag_common.api_types import item_id_for
from dag_common.auth import bearer
from demo.waits import wait_for

PACE = 0.02  # between two messages: a steady trickle of mail, not a flood


class MailDuring:
    """Messages for alice and bob given to the transport, one every 20 ms, in a thread,
    while something else runs (a move of alice): each must arrive once, wherever its
    mailbox is by then."""

    def __init__(self, config_path: Path) -> None:
        config = yaml.safe_load(config_path.read_text())
        self.url = config["transports"][0]["url"]
        self.token = (config_path.parent / "token").read_text().strip()
        self.sent: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._send, name="mail", daemon=True)

    def _post(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.url + path, data=data, headers={**bearer(self.token), "Content-Type":
                                                 "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as resp:
            return dict(json.load(resp))

    def _send(self) -> None:
        n = 0
        while not self._stop.is_set():
            message_id = f"<demo.{n}@example.com>"
            self._post("/v1/messages", {
                "message_id": message_id, "recipients": ["alice", "bob"],
                "subject": f"message {n}", "body": f"delivered wherever alice is: {n}",
            })  # fmt: skip
            self.sent.append(message_id)
            n += 1
            self._stop.wait(PACE)  # the pace of the mail, which a stop ends at once

    def __enter__(self) -> MailDuring:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def drained(self, timeout: float = 120) -> dict[str, Any]:
        """The transport's queue once nothing waits in it."""
        state: dict[str, Any] = {}

        def empty() -> dict[str, Any] | None:
            nonlocal state
            state = self._get("/v1/queue")
            return state if state["waiting"] == 0 and state["deliveries"]["Queued"] == 0 else None

        answer = wait_for(empty, timeout)
        if answer is None:
            raise SystemExit(f"the transport did not deliver everything: {state}")
        return answer

    def delivered_once(self, node_url: str, database: str, mailbox: str) -> str:
        """Each message sent is in `mailbox` exactly once (the item its id names); the line
        that says so, or SystemExit."""
        items = self._get(f"/v1/databases/{database}/mailboxes/{mailbox}/items", node_url)
        live = {i["item_id"] for i in items["items"] if not i["deleted"]}
        missing = [m for m in self.sent if item_id_for(m) not in live]
        if missing:
            raise SystemExit(f"{len(missing)} messages are not in {mailbox}: {missing[:3]}")
        return f"all {len(self.sent)} messages, each once, in {database}"

    def _get(self, path: str, base: str | None = None) -> dict[str, Any]:
        request = urllib.request.Request((base or self.url) + path, headers=bearer(self.token))
        with urllib.request.urlopen(request, timeout=30) as resp:
            return dict(json.load(resp))
