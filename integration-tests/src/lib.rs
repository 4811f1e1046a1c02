//! Cluster harness: starts real `sluice` processes on loopback ports.
