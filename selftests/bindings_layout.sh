#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# C and Rust (bindgen) agree on the layout of the kernel structures Rust code
# uses (bindings_layout/layout.list). A mismatch means every Rust access to
# such a structure reads the wrong bytes; it has happened: with this config
# minus SCHEDSTATS, task_struct differs by 48 bytes before `pid`.
. "$(dirname "$0")/lib.sh"
dir=$(dirname "$0")/bindings_layout

mark=$(zn_log_mark)
insmod "$dir/zn_layout_c.ko" && insmod "$dir/zn_layout_rs.ko" ||
	{ ktap_print_header; ktap_exit_fail_msg "cannot load the layout modules"; }
rmmod zn_layout_c zn_layout_rs
log=$(zn_log_since "$mark" | grep -o 'zn_layout .*')

checks=$(grep -v '^#' "$dir/layout.list" | grep -c .)
ktap_print_header
ktap_set_plan "$checks"
while read -r kind st field; do
	[ -n "$kind" ] && [ "${kind#\#}" = "$kind" ] || continue
	name=$st${field:+.$field}
	c=$(awk -v k="$kind" -v n="$name" '$2 == "c" && $3 == k && $4 == n {print $5}' <<<"$log")
	r=$(awk -v k="$kind" -v n="$name" '$2 == "rust" && $3 == k && $4 == n {print $5}' <<<"$log")
	if [ -n "$c" ] && [ "$c" = "$r" ]; then
		ktap_test_pass "$kind of $name: C $c = Rust $r"
	else
		ktap_test_fail "$kind of $name: C ${c:-?} != Rust ${r:-?}"
	fi
done <"$dir/layout.list"
ktap_finished
