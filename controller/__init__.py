"""The P4Runtime controller: static table entries from the fabric model, pushed to every switch.

- ``p4info``    -- the P4Info by name: ids, table entries from readable values and back;
- ``client``    -- ``SwitchClient``, one P4Runtime session per switch (arbitration, pipeline,
  Write with per-update errors, Read of tables, counters and registers);
- ``entries``   -- the intended entries of every switch, computed from ``topologies.Fabric``,
  and their diff against the installed ones;
- ``qos``       -- trim/ECN thresholds: defaults from the queue depth, persisted overrides;
- ``encode``    -- Write requests encoded straight to wire bytes for bulk writes;
- ``push``      -- reconcile one switch, push many in parallel, per-switch reports;
- ``watch``     -- the reconcile loop of ``mrc-ctl watch``;
- ``counters``  -- the contract's counters by port and by drop reason;
- ``endpoints`` -- which fabric and which switch addresses (state file or flags);
- ``cli``       -- ``mrc-ctl``;
- ``targets``, ``bmv2`` -- switch processes (the common base and the BMv2 launcher).
"""
