"""The request edges, property-based (hypothesis): whatever a client sends, the node API's
typed models answer with a model or a BadRequest naming a field, and the gRPC flush target
with a checked target or INVALID_ARGUMENT's error; nothing else ever escapes (no TypeError,
OverflowError or RecursionError reaching a 500 / INTERNAL).  The table tests beside them
(test_bad_requests_e2e, test_service) hold the cases found by hand over real servers."""

from __future__ import annotations

import orjson
import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from hypothesis import given, settings
from hypothesis import strategies as st

from dag_common._generated.dataguarantee.v1 import data_guarantee_pb2 as pb
from dag_common.guarantee_wire import MAX_LSN_FIELD
from guarantee_api.errors import InvalidRequestError
from guarantee_api.servicer import MAX_COMMIT_SECONDS, flush_target
from replication_node.errors import BadRequest
from replication_node.http import models as api_models

MODELS = [
    api_models.MailboxIn,
    api_models.FolderIn,
    api_models.ItemIn,
    api_models.ItemsIn,
    api_models.ReasonIn,
    api_models.ActivateIn,
    api_models.TargetIn,
    api_models.HandOverIn,
]

# Any JSON a client may send: text with lone surrogates, huge and negative numbers, nesting.
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False)
    | st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=40)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=20,
)
field_names = st.sampled_from(
    [
        *("item_id", "subject", "body", "folder", "items", "display_name", "folders"),
        *("reason", "node", "mount_dial_override", "target", "to", "locked", "colour"),
    ]
)
bodies = st.dictionaries(field_names, values, max_size=5)


@pytest.mark.parametrize("model", MODELS, ids=[m.__name__ for m in MODELS])
@settings(max_examples=150, deadline=None)
@given(body=bodies)
def test_a_node_request_body_is_a_model_or_a_bad_request_naming_a_field(model, body):
    try:
        parsed = api_models.parse(model, body)
    except BadRequest as exc:
        where, _, why = str(exc).partition(": ")
        assert where and why, f"the error names the field: {exc}"
        return
    # what is accepted can be encoded for the log as it is (no lone surrogate, no overflow)
    orjson.dumps(parsed.model_dump())


u64 = st.integers(min_value=0, max_value=2**64 - 1)


@settings(max_examples=300, deadline=None)
@given(generation=u64, offset=u64, epoch=u64)
def test_an_lsn_target_is_in_range_or_invalid_argument(generation, offset, epoch):
    request = pb.CheckReplicationFlushRequest(
        database="DB1", caller_id="m", lsn=pb.Lsn(generation=generation, offset=offset, epoch=epoch)
    )
    valid = 1 <= generation <= MAX_LSN_FIELD and offset <= MAX_LSN_FIELD and epoch <= MAX_LSN_FIELD
    try:
        target = flush_target(request)
    except InvalidRequestError as exc:
        assert not valid and "lsn." in str(exc)
        return
    assert valid and target.lsn is not None
    assert (target.lsn.generation, target.lsn.offset, target.lsn.epoch) == (
        generation,
        offset,
        epoch,
    )


@settings(max_examples=300, deadline=None)
@given(
    seconds=st.integers(min_value=-(2**63), max_value=2**63 - 1),
    nanos=st.integers(min_value=-(2**31), max_value=2**31 - 1),
)
def test_a_commit_time_target_is_a_real_time_or_invalid_argument(seconds, nanos):
    request = pb.CheckReplicationFlushRequest(
        database="DB1", caller_id="m", commit_time=Timestamp(seconds=seconds, nanos=nanos)
    )
    try:
        target = flush_target(request)
    except InvalidRequestError as exc:
        assert "commit_time" in str(exc)
        return
    assert 0 < seconds < MAX_COMMIT_SECONDS and 0 <= nanos < 10**9
    assert target.commit_time is not None and target.commit_time.tzinfo is not None
