//! Scripted players of repeated matrix games. Action 0 is the cooperative one.

use crate::policy::{Decision, Policy};

const COOPERATE: u8 = 0;
const DEFECT: u8 = 1;

/// Always action 0.
pub struct AlwaysCooperate;
/// Always action 1.
pub struct AlwaysDefect;
/// Cooperates first, then copies the other player's last move.
pub struct TitForTat;
/// Cooperates until the other player defects once, then always defects.
pub struct GrimTrigger;

impl Policy for AlwaysCooperate {
    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        batch.iter_mut().for_each(|d| d.action.0 = COOPERATE);
    }
}

impl Policy for AlwaysDefect {
    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        batch.iter_mut().for_each(|d| d.action.0 = DEFECT);
    }
}

impl Policy for TitForTat {
    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        for d in batch {
            d.action.0 = d
                .senses
                .history()
                .last()
                .map_or(COOPERATE, |&[_, other]| other);
        }
    }
}

impl Policy for GrimTrigger {
    fn decide(&mut self, batch: &mut [Decision<'_>]) {
        for d in batch {
            d.action.0 = if d.senses.other_counts()[1] > 0 {
                DEFECT
            } else {
                COOPERATE
            };
        }
    }
}
