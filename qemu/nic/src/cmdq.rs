//! Command unit: executes command-queue entries against the MR Table, Flow
//! Table and MS Lists, in order, one completion per command.

use std::time::Instant;

use zeronic_hw::cmd::*;
use zeronic_hw::regs::*;
use zeronic_hw::status::*;

use crate::device::Device;
use crate::mem::GuestMem;
use crate::mr::RegRequest;

/// Commands executed per scan (bounds the time the device lock is held).
const CMD_BUDGET: u32 = 64;
/// Page-list entries registrations may read per scan; the command that
/// crosses it is the scan's last (a maximal registration takes one scan).
const PAGE_BUDGET: u64 = MR_MAX_PAGES as u64;

/// Reads the `N`-byte block a command names at `addr` (an IPv6 address
/// block, an RSS table): `ST_BAD_DESC` unless 8-byte aligned, `ST_DMA`
/// unless inside guest RAM.
fn read_block<const N: usize>(mem: &GuestMem, addr: u64) -> Result<[u8; N], u16> {
    if addr % 8 != 0 {
        return Err(ST_BAD_DESC);
    }
    mem.read_array::<N>(addr).map_err(|_| ST_DMA)
}

impl Device {
    /// Executes pending commands while completions fit.
    pub fn process_commands(&mut self, now: Instant) {
        let Some(mem) = self.mem.clone() else { return };
        if !self.cmdq.on || !self.cmdcq.on {
            return;
        }
        let Some(n) = self.cmdq.pending(&self.bar) else {
            self.fail_cmdq();
            return;
        };
        let mut pages = 0u64;
        for _ in 0..n.min(CMD_BUDGET) {
            if self.cmdcq.space(&self.bar) == 0 || pages >= PAGE_BUDGET {
                break; // back-pressure / work bound: the command stays queued
            }
            let addr = self.cmdq.slot(self.cmdq.idx);
            let (hdr, res) = match mem.read_array::<64>(addr) {
                Ok(b) => {
                    let mut h = [0u8; 8];
                    h.copy_from_slice(&b[..8]);
                    let hdr = CmdHeader::decode(&h);
                    if hdr.opcode == CMD_FLOW_UPDATE && self.hold_updates {
                        break; // `fault hold`: it stays queued
                    }
                    if hdr.opcode == CMD_MR_REG {
                        pages += CmdMrReg::decode(&b).npages.min(MR_MAX_PAGES) as u64;
                    }
                    (hdr, self.execute(&b, hdr.opcode, now))
                }
                Err(_) => (CmdHeader::default(), Err(ST_DMA)),
            };
            self.cmdq.consume(&self.bar);
            let (status, result) = match res {
                Ok(r) => (ST_OK, r),
                Err(s) => (s, 0),
            };
            self.gstat(
                if status == ST_OK {
                    GSTAT_CMD_OK
                } else {
                    GSTAT_CMD_ERR
                },
                1,
            );
            let c = CmdCompletion {
                cookie: hdr.cookie,
                opcode: hdr.opcode,
                status,
                result,
            };
            if self.cmdcq.produce(&self.bar, &mem, &c.encode()) {
                self.note_entry(VEC_ASYNC, now);
            }
        }
    }

    /// Executes one command; Ok carries the completion's `result`.
    fn execute(&mut self, b: &[u8; 64], op: u16, now: Instant) -> Result<u64, u16> {
        let Some(mem) = self.mem.clone() else {
            return Err(ST_DMA);
        };
        match op {
            CMD_NOP => Ok(0),
            CMD_MR_REG => {
                let c = CmdMrReg::decode(b);
                let req = RegRequest {
                    access: c.access,
                    npages: c.npages,
                    first_off: c.first_off,
                    length: c.length,
                    page_list: c.page_list,
                };
                self.mrs.register(&mem, &req)
            }
            CMD_MR_INVAL => {
                // All DMA of this guest's device happens under the same lock
                // as this command, so none is in flight once we return.
                let c = CmdMrInval::decode(b);
                self.mrs.invalidate(c.key)?;
                self.flows.drop_key(c.key);
                Ok(0)
            }
            CMD_FLOW_INSTALL => {
                let c = CmdFlow::decode(b);
                // An IPv6 flow's addresses are in guest memory (§15).
                let addr6 = if c.flags & FLOWI_IPV6 != 0 {
                    Some(FlowAddr6::decode(&read_block(&mem, c.addr6())?))
                } else {
                    None
                };
                let idx = self
                    .flows
                    .install(&c, addr6.as_ref(), self.nports, &self.mrs)?;
                Ok(idx as u64)
            }
            CMD_FLOW_UPDATE => {
                let c = CmdFlow::decode(b);
                let r = self.flows.update(&c)?;
                if c.flags == FLOWU_QUEUE {
                    // The flow's open entry goes out on its old queue pair
                    // before the completion: later ones use the new one.
                    for p in 0..self.nports {
                        let open = self.ports[p as usize].open.as_ref();
                        if open.is_some_and(|o| o.meta.flow == c.flow) {
                            self.flush_open(p, now);
                        }
                    }
                }
                Ok(r)
            }
            CMD_FLOW_REMOVE => {
                let c = CmdFlow::decode(b);
                self.flows.remove(c.flow)?;
                for p in &mut self.ports {
                    if p.open.as_ref().is_some_and(|o| o.meta.flow == c.flow) {
                        p.open = None; // never report a removed flow
                    }
                }
                Ok(0)
            }
            // `fault refuse-posts`: as if the flow's MS List were full.
            CMD_MS_POST if self.refuse_posts => Err(ST_NO_SPACE),
            CMD_MS_POST => {
                let c = CmdMsPost::decode(b);
                self.flows.post(&c, &self.mrs)
            }
            CMD_RULE_SET | CMD_RULE_CLEAR => {
                let c = CmdRule::decode(b);
                let port = self.ports.get_mut(usize::from(c.port)).ok_or(ST_PORT)?;
                if op == CMD_RULE_SET {
                    // An IPv6 rule's addresses are in guest memory (§16).
                    let addr6 = |a| read_block(&mem, a).map(|b| RuleAddr6::decode(&b));
                    port.steer.set_rule(&c, addr6)
                } else {
                    port.steer.clear_rule(c.index).map(|()| 0)
                }
            }
            CMD_RSS_CTX_SET => {
                let c = CmdRssCtx::decode(b);
                let port = self.ports.get_mut(usize::from(c.port)).ok_or(ST_PORT)?;
                port.steer.set_context(&c, |a| read_block(&mem, a))
            }
            _ => Err(ST_BAD_OPCODE),
        }
    }
}
