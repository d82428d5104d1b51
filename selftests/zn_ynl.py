#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Netlink requests for the shell selftests, through the booted kernel tree's
own ynl library (tools/net/ynl/pyynl), which speaks what Debian 12's ethtool
6.1 predates (tcp-data-split, hds-thresh, rx-cqe-frames, qstats).

Loading a family's spec takes some 20 s in a TCG guest, so this runs as one
process answering many requests: one per line on stdin,

    FAMILY do|dump OPERATION JSON

and one JSON line per request on stdout: the reply (a list for dump, {} for
an empty one), or {"error": ERRNO, "msg": "the extended ACK's message"}.
"""

import json
import os
import sys

KDIR = os.environ["ZN_KDIR"]
sys.path.append(os.path.join(KDIR, "tools/net/ynl/pyynl"))
# pylint: disable=wrong-import-position
from lib import NlError, YnlFamily  # noqa: E402

SPECS = os.path.join(KDIR, "Documentation/netlink/specs")
families = {}


def answer(line):
    fam, kind, op, arg = line.split(None, 3)
    if fam not in families:
        families[fam] = YnlFamily(os.path.join(SPECS, fam + ".yaml"), schema="")
    ynl = families[fam]
    req = json.loads(arg)
    try:
        reply = ynl.dump(op, req) if kind == "dump" else ynl.do(op, req)
    except NlError as e:
        msg = (e.nl_msg.extack or {}).get("msg", "")
        return {"error": e.error, "msg": msg}
    return reply if reply is not None else {}


for request in sys.stdin:
    if not request.strip():
        continue
    try:
        out = answer(request)
    except Exception as e:  # pylint: disable=broad-except
        out = {"error": -1, "msg": f"{type(e).__name__}: {e}"}
    print(json.dumps(out, default=str), flush=True)
