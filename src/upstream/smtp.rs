//! `smtp://` and `smtps://` upstream through lettre (to be written).
