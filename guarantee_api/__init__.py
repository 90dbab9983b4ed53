"""The Data Guarantee service: answers CheckReplicationHealth and CheckReplicationFlush for a
database against its DataMoveReplicationConstraint, from a live view of every node's status."""
