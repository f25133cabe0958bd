//! The one way Toolyard locks a mutex.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Lock `m`, taking over a lock another thread poisoned by panicking while it held it.
///
/// Every mutex Toolyard shares guards state that stays whole across such a panic (maps of
/// whole entries, a connection whose transaction rolled back as its guard dropped), so one
/// panicked call must not make every later call on the same state panic too.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
