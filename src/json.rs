//! Lossless JSON: validation of JSON text as dsh's lossless-JSON boundary does it, a value
//! tree with JavaScript semantics, and `JSON.stringify`-exact printing.
