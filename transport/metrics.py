"""The transport's Prometheus metrics, in a registry of its own (one per service)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class TransportMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.accepted = Counter(
            "transport_messages_accepted", "Messages accepted (queued, fsync'd)", registry=r
        )
        self.refused = Counter(
            "transport_messages_refused", "Messages refused at submission", ["reason"],
            registry=r,
        )  # fmt: skip
        self.calls_refused = Counter(
            "transport_calls_refused",
            "API calls refused: 401 without a known credential, 403 without the route's role",
            ["role", "code"], registry=r,
        )  # fmt: skip
        self.delivered = Counter(
            "transport_deliveries", "Deliveries durable on their database", ["database"],
            registry=r,
        )  # fmt: skip
        self.failed = Counter(
            "transport_delivery_failures", "Delivery tries that failed, by kind", ["kind"],
            registry=r,
        )  # fmt: skip
        self.poison = Counter(
            "transport_poison", "Deliveries moved to the poison queue", registry=r
        )
        self.redelivered = Counter(
            "transport_redelivered", "Messages queued again from the dumpster", ["database"],
            registry=r,
        )  # fmt: skip
        self.dumpster_evicted = Counter(
            "transport_dumpster_evicted", "Messages let out of the dumpster by its bounds",
            ["database"], registry=r,
        )  # fmt: skip
        self.queue_length = Gauge(
            "transport_queue_length", "Deliveries waiting in the queue", registry=r
        )
        self.dumpster_bytes = Gauge(
            "transport_dumpster_bytes", "Bytes in each database's dumpster", ["database"],
            registry=r,
        )  # fmt: skip
        self.delivery_seconds = Histogram(
            "transport_delivery_seconds", "One delivery call to a node", registry=r
        )
        self.submit_to_durable_seconds = Histogram(
            "transport_submit_to_durable_seconds",
            "From a message's submission to its delivery durable on the active copy",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=r,
        )
        # The SMTP and LMTP listeners, each its own `listener` label.
        self.mail_sessions = Counter(
            "transport_mail_sessions", "Sessions opened with a mail listener", ["listener"],
            registry=r,
        )  # fmt: skip
        self.mail_sessions_open = Gauge(
            "transport_mail_sessions_open", "Sessions open now", ["listener"], registry=r
        )
        self.mail_messages = Counter(
            "transport_mail_messages",
            "Messages a mail listener answered 250 for (queued, fsync'd)", ["listener"],
            registry=r,
        )  # fmt: skip
        self.mail_bytes = Counter(
            "transport_mail_bytes", "Bytes of the messages a mail listener queued",
            ["listener"], registry=r,
        )  # fmt: skip
        self.mail_refusals = Counter(
            "transport_mail_refusals",
            "Replies of 4xx or 5xx a mail listener gave (per recipient after an LMTP DATA)",
            ["listener", "code", "status"], registry=r,
        )  # fmt: skip
        self.mail_errors = Counter(
            "transport_mail_errors", "Unexpected exceptions in a mail session (a bug)",
            ["listener"], registry=r,
        )  # fmt: skip
