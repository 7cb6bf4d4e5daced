//! Analysis shared by the experiments and the end-to-end tests.
