"""How generations travel from the active copy to its passive copies: one place.

    active (log/writer.py closes E0000000A.log; active/share.py is its LogShareSource)
      │  logshare.py        GET routes: share info, notifications (NDJSON), a closed
      │                     generation's bytes, a seed of the database file, the open log
      │                     held for Attempt Copy Last Logs
      │  blocks.py+frames.py  block mode: the open log's durable blocks over a WebSocket,
      │                     acknowledged by the copy for synchronous commit
      ▼
    passive (logshare_client.py is its LogSource; passive/copier.py pulls closed
      │      generations and inspects them, passive/blocks.py writes the blocks it receives)
      │  copy_share.py      another copy's inspected generations, for a generation the active
      │                     could not give whole (asked by the copier), or that was damaged
      │                     on the active's own disk in its LLR window (active/log_mend.py)
      ▼
    replay (passive/replayer.py), truncation (active/truncator.py, from the copies' replay)

The seams the pipeline sees are `interfaces.py`; every route is read-only and needs a
credential of the replication role.  This floor sits above `storage` and below
`active`/`passive`: it knows log files and their names, never a copy's state.
"""
