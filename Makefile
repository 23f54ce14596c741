# mrc-testbed developer targets.
#
#   make p4      compile p4src/mrc_switch.p4 for BMv2 (needs p4c; output in p4src/build/)
#   make demo    run the demo experiment (./testbed demo)
#   make test    run the test suite (./testbed test)

P4C ?= p4c
P4_SRC := p4src/mrc_switch.p4
P4_INCLUDES := $(wildcard p4src/include/*.p4)
P4_BUILD := p4src/build

.PHONY: p4 demo test clean-p4

p4: $(P4_BUILD)/mrc_switch.json

$(P4_BUILD)/mrc_switch.json: $(P4_SRC) $(P4_INCLUDES)
	@command -v $(P4C) >/dev/null 2>&1 || { \
		echo "make p4: '$(P4C)' is not on PATH; install p4c (scripts/install.sh --with-bmv2)" >&2; \
		exit 1; }
	@mkdir -p $(P4_BUILD)
	$(P4C) --target bmv2 --arch v1model \
		--p4runtime-files $(P4_BUILD)/mrc_switch.p4info.txtpb \
		-o $(P4_BUILD) $(P4_SRC)

demo:
	./testbed demo

test:
	./testbed test

clean-p4:
	rm -rf $(P4_BUILD)
