"""The move-request client: moves mailboxes between databases in the seed's ten steps,
gated on the Data Guarantee API, persistent and resumable."""
