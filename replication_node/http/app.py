"""The node's aiohttp application: each route held to its role (`dag_common.route_roles`),
a request read after its caller's deadline refused (`dag_common.deadline`), the one JSON
error answer, the store, status and admin routes, `/metrics`, and the log share
of the active copies here."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from dag_common.deadline_middleware import deadline_middleware
from dag_common.http_body import items_body_size
from dag_common.route_roles import role_middleware
from replication_node.http.admin_routes import add_admin_routes
from replication_node.http.backup_routes import add_backup_routes
from replication_node.http.changes_routes import add_changes_routes
from replication_node.http.context import NODE
from replication_node.http.error_middleware import error_middleware
from replication_node.http.folder_routes import add_folder_routes
from replication_node.http.in_flight import setup_in_flight
from replication_node.http.message_read import add_message_read_routes
from replication_node.http.message_upload import add_message_upload_routes
from replication_node.http.soft_deleted_routes import add_soft_deleted_routes
from replication_node.http.status_watch import add_status_watch_route
from replication_node.http.store_routes import add_store_routes
from replication_node.metrics import add_metrics_route
from replication_node.node import Node
from replication_node.shipping.copy_share import add_copy_share_routes
from replication_node.shipping.interfaces import LogShareSource
from replication_node.shipping.logshare import add_log_share_routes


def _node_identity(node: Node) -> Callable[[], set[str]] | None:
    """Under node identity (`tls.client_ca_file`), the names a replication caller's client
    certificate must give: the config's nodes, as it is now."""
    tls = node.config.tls
    if tls is None or tls.client_ca_file is None:
        return None
    return lambda: {n.name for n in node.config.nodes}


def build_app(node: Node) -> web.Application:
    """The node's aiohttp application: auth, errors, store/status/admin and log share."""

    app = web.Application(
        middlewares=[
            role_middleware(node.credentials, on_call=node.audit, nodes=_node_identity(node)),
            # after the credential check: a known caller's late call is audited as refused
            deadline_middleware(lambda: node.clock.now().timestamp()),
            error_middleware,
        ],
        # Bodies are read by `body.py` within each request's own limit, from the config as
        # it is at the request; this is aiohttp's cap for a handler that reads one itself
        # (`request.read()`), as large as the largest write the config allows.
        client_max_size=items_body_size(node.config.largest_max_item_size()),
    )
    app[NODE] = node
    add_store_routes(app)
    add_message_upload_routes(app)
    add_message_read_routes(app)
    add_folder_routes(app)
    add_changes_routes(app, metrics=node.metrics)
    add_soft_deleted_routes(app)
    add_admin_routes(app)
    add_backup_routes(app)
    add_status_watch_route(app)
    add_metrics_route(app, node.metrics)

    def lookup(database: str) -> LogShareSource | None:
        instance = node.active_here(database)
        # Mounted, or not mounted and holding its last logs for the copy taking over.
        if instance is not None and (instance.copy or instance.share.holding()):
            return instance.share
        return None

    add_log_share_routes(app, lookup=lookup)

    # Looked up when a request comes (an app built over a partial node, as the route tables'
    # tests build it, serves whatever they ask of it).
    add_copy_share_routes(app, lookup=lambda database: node.passive_here(database))
    setup_in_flight(app)  # last: its shutdown hook runs after the streams' hooks
    return app
