//! Changing an open log's settings: the fsync policy, the segment size and age, retention,
//! the cleanup policy and compaction's settings, and the largest batch. Each is read where
//! it applies, so the change takes effect at once: the next append (batch limit, fsync
//! wait), the next roll check (segment size and age), the next cleaning pass (retention,
//! compaction). The write-behind buffers, the index interval, preallocation and the
//! recovery mode shape files already open and are fixed while the log is.
//!
//! A change of the fsync policy: to `interval:MS` starts a new interval flusher (the old
//! one, if any, ends); away from it, the flusher ends. To `always`, what readers could see
//! already (the written end) stays visible, and everything appended from then on is
//! visible once fsynced; appends waiting for a sync under the old policy still get it.
//! Away from `always`, the visible end moves up to the written end, never back.

use std::rc::Rc;

use super::Log;
use super::flush::spawn_interval_flusher;
use crate::config::{FsyncPolicy, LogConfig};
use crate::error::{LogError, Result};
use crate::storage::Storage;

impl<S: Storage> Log<S> {
    /// Replaces the log's settings with `new`, checked first ([`LogConfig::validate`]);
    /// nothing changes if it is refused. `write_buffer_bytes`, `write_behind_buffers`,
    /// `index_interval_bytes`, `preallocate`, `preallocate_step_bytes` and `recovery` must
    /// stay as they are.
    pub fn reconfigure(&self, new: LogConfig) -> Result<()> {
        new.validate()?;
        let old = self.config();
        let fixed = [
            ("write_buffer_bytes", old.write_buffer_bytes == new.write_buffer_bytes),
            ("write_behind_buffers", old.write_behind_buffers == new.write_behind_buffers),
            ("index_interval_bytes", old.index_interval_bytes == new.index_interval_bytes),
            ("preallocate", old.preallocate == new.preallocate),
            ("preallocate_step_bytes", old.preallocate_step_bytes == new.preallocate_step_bytes),
            ("recovery", old.recovery == new.recovery),
        ];
        if let Some((name, _)) = fixed.iter().find(|(_, same)| !same) {
            return Err(LogError::InvalidConfig(format!("{name} cannot change while the log is open")));
        }
        if self.inner.state.borrow().is_closed {
            return Err(self.closed_error());
        }
        let start_flusher = {
            let st = &mut *self.inner.state.borrow_mut();
            if new.fsync == FsyncPolicy::Always && old.fsync != FsyncPolicy::Always {
                st.visible_floor = st.visible_floor.max(st.written_offset);
            }
            let restart = new.fsync != old.fsync;
            if restart {
                // The running flusher (if any) ends: parked, it is woken to see that.
                st.flusher_epoch += 1;
                if let Some(w) = st.flusher.take() {
                    w.wake();
                }
            }
            *self.inner.config.borrow_mut() = new.clone();
            restart && matches!(new.fsync, FsyncPolicy::Interval(_))
        };
        if start_flusher {
            let epoch = self.inner.state.borrow().flusher_epoch;
            spawn_interval_flusher(Rc::downgrade(&self.inner), epoch);
        }
        Ok(())
    }
}
