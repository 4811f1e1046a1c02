//! Unit tests of the group state machine (fake clock).
use super::*;
