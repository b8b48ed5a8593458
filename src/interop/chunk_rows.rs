//! dsh packed chunk rows (`text-chunks`, `reasoning-chunks`, `tool-call-chunks`).
