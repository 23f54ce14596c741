# mrc-testbed developer targets.
#
#   make p4        compile p4src/mrc_switch.p4 with p4c and rewrite the committed P4Info and
#                  BMv2 JSON beside it (the contract shared by the controller and both targets)
#   make p4-check  exit 1 if the committed P4Info or JSON differ from what p4c produces
#   make demo      run the demo experiment (./testbed demo)
#   make test      run the test suite (./testbed test)

.PHONY: p4 p4-check demo test

p4:
	./testbed p4

p4-check:
	./testbed p4 --check

demo:
	./testbed demo

test:
	./testbed test
