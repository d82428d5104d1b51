//! Command unit: executes command-queue entries against the MR Table, Flow
//! Table and MS Lists, in order, one completion per command.

use std::time::Instant;

use zeronic_hw::cmd::*;
use zeronic_hw::regs::*;
use zeronic_hw::status::*;

use crate::device::Device;

/// Commands executed per scan (bounds the time the device lock is held).
const CMD_BUDGET: u32 = 64;

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
        for _ in 0..n.min(CMD_BUDGET) {
            if self.cmdcq.space(&self.bar) == 0 {
                break; // back-pressure: the command stays queued
            }
            let addr = self.cmdq.slot(self.cmdq.idx);
            let (hdr, res) = match mem.read_array::<64>(addr) {
                Ok(b) => {
                    let mut h = [0u8; 8];
                    h.copy_from_slice(&b[..8]);
                    let hdr = CmdHeader::decode(&h);
                    (hdr, self.execute(&b, hdr.opcode))
                }
                Err(_) => (CmdHeader::default(), Err(ST_DMA)),
            };
            self.cmdq.consume(&self.bar);
            let (status, result, result2) = match res {
                Ok((r, r2)) => (ST_OK, r, r2),
                Err(s) => (s, 0, 0),
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
                result2,
            };
            if self.cmdcq.produce(&self.bar, &mem, &c.encode()) {
                self.note_entry(VEC_ASYNC, now);
            }
        }
    }

    fn execute(&mut self, b: &[u8; 64], op: u16) -> Result<(u32, u32), u16> {
        let Some(mem) = self.mem.clone() else {
            return Err(ST_DMA);
        };
        match op {
            CMD_NOP => Ok((0, 0)),
            CMD_MR_REG => {
                let c = CmdMrReg::decode(b);
                let key = self.mrs.register(
                    &mem,
                    c.access,
                    c.npages,
                    c.first_off,
                    c.length,
                    c.page_list,
                )?;
                Ok((key, 0))
            }
            CMD_MR_INVAL => {
                // All DMA of this guest's device happens under the same lock
                // as this command, so none is in flight once we return.
                let c = CmdMrInval::decode(b);
                self.mrs.invalidate(c.key)?;
                self.flows.drop_key(c.key);
                Ok((0, 0))
            }
            CMD_FLOW_INSTALL => {
                let c = CmdFlow::decode(b);
                let idx = self.flows.install(&c, self.nports, &self.mrs)?;
                Ok((idx, 0))
            }
            CMD_FLOW_UPDATE => {
                let c = CmdFlow::decode(b);
                self.flows.update(&c)?;
                Ok((c.flow, 0))
            }
            CMD_FLOW_REMOVE => {
                let c = CmdFlow::decode(b);
                self.flows.remove(c.flow)?;
                for p in &mut self.ports {
                    if p.open.as_ref().is_some_and(|o| o.meta.flow == c.flow) {
                        p.open = None; // never report a removed flow
                    }
                }
                Ok((c.flow, 0))
            }
            CMD_MS_POST => {
                let c = CmdMsPost::decode(b);
                let start = self.flows.post(&c, &self.mrs)?;
                Ok((c.flow, start as u32))
            }
            _ => Err(ST_BAD_OPCODE),
        }
    }
}
