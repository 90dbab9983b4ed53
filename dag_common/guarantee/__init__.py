"""The Data Guarantee's rules, pure: the values they take and return (`values`), each
condition on a copy (`conditions`), and the verdict for a database against its constraint
(`policy`).  On the ground floor because two rooms apply them: the guarantee service to
live status, `spark_metrics` to the recorded history."""
