//! The parallel walk `glob` and `grep` share: one visitor per walker thread collects what it
//! finds on its own, and hands it to the total when its thread ends (no lock per entry).

use std::sync::Mutex;

use ignore::{DirEntry, ParallelVisitor, ParallelVisitorBuilder, WalkParallel, WalkState};
use tokio_util::sync::CancellationToken;

/// One walker thread's look at the entries it is given.
pub(super) trait Visit: Send {
    /// What the threads' findings add up to.
    type Total: Default + Send;
    /// Look at `entry`, keeping what it finds.
    fn visit(&mut self, entry: &DirEntry);
    /// Hand what this thread kept to `total` (once, as the thread ends).
    fn merge_into(&mut self, total: &mut Self::Total);
}

/// Walk `walker`, each of its threads with a visitor of `make`, until the walk ends or
/// `cancel` is cancelled; what they found, merged.
pub(super) fn walk<V, F>(walker: WalkParallel, cancel: &CancellationToken, make: F) -> V::Total
where
    V: Visit,
    F: FnMut() -> V,
{
    let total = Mutex::new(V::Total::default());
    walker.visit(&mut Builder {
        make,
        total: &total,
        cancel,
    });
    total
        .into_inner()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Makes each walker thread's [`Thread`].
struct Builder<'m, V: Visit, F> {
    make: F,
    total: &'m Mutex<V::Total>,
    cancel: &'m CancellationToken,
}

impl<'m, V, F> ParallelVisitorBuilder<'m> for Builder<'m, V, F>
where
    V: Visit + 'm,
    F: FnMut() -> V,
{
    fn build(&mut self) -> Box<dyn ParallelVisitor + 'm> {
        Box::new(Thread {
            visitor: (self.make)(),
            total: self.total,
            cancel: self.cancel,
        })
    }
}

/// One walker thread: its visitor, merged into the total when the walker drops it.
struct Thread<'m, V: Visit> {
    visitor: V,
    total: &'m Mutex<V::Total>,
    cancel: &'m CancellationToken,
}

impl<V: Visit> ParallelVisitor for Thread<'_, V> {
    fn visit(&mut self, entry: Result<DirEntry, ignore::Error>) -> WalkState {
        if self.cancel.is_cancelled() {
            return WalkState::Quit;
        }
        if let Ok(entry) = entry {
            self.visitor.visit(&entry);
        }
        WalkState::Continue
    }
}

impl<V: Visit> Drop for Thread<'_, V> {
    fn drop(&mut self) {
        let mut total = self
            .total
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        self.visitor.merge_into(&mut total);
    }
}
