"""The P4 program of the testbed's switch and what is built from it.

``mrc_switch.p4`` (with ``include/``) is the P4_16 program for BMv2's v1model; p4c's two outputs,
the P4Info (``mrc_switch.p4info.txtpb``) and the BMv2 JSON (``mrc_switch.json``), are committed
beside it. Modules:

- ``contract`` -- the program's names, drop reasons, code points and ECMP hash, written once for
  the controller, both switch targets, the host stack and the tests (imports nothing of the
  project);
- ``compile`` -- compiling the program with p4c, the committed outputs and the check that they
  are p4c's (``./testbed p4 [--check]``, or ``python -m p4src.compile [--check]``);
- ``proto`` -- the P4Runtime and P4Info protobuf classes, generated for current protobuf, that
  the controller and the switchmodel speak.
"""
