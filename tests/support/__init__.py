"""What the test suites share, imported as ``support`` (``tests/`` is on the import path).

- ``fabric``  the shipped small fabric (:func:`fabric.small_fabric`) and its topology file;
- ``switch``  switchmodel's P4Runtime server run in-process over a bare pipeline state
              (:class:`switch.InProcessSwitch`);
- ``loop``    an agent's socket served on a selector loop in a thread
              (:class:`loop.SelectorLoop`).

A free TCP port for a switch is :func:`targets.lab.free_port`.

``tests/conftest.py`` makes the small fabric the ``fabric`` fixture (a module may override it
with fabrics of its own); ``tests/switchmodel/conftest.py`` serves an in-process switch as the
``switch`` fixture.
"""
