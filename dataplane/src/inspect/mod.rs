//! First-payload inspection: TLS ClientHello and HTTP/1 request head parsers.
