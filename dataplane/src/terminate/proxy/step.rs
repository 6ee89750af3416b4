//! One request's bytes both ways on an open backend connection: the head and body out,
//! the response head read and rewritten, the body passed to the client as its buffers
//! allow; and the small writers the exchange uses (sluice's own answers, plaintext to
//! a TLS or plain client).

use super::{Failure, Http, Stage};
use crate::http::{self as h1, Body, Framing, Parse, MAX_HEADERS};
use crate::pipeline::stage::Ctx;
use crate::stats::Event;
use crate::tables::http::{Header, HeaderOps};
use crate::terminate::conn::{fin_received, flush_tls};
use rustls::server::ServerConnection;
use smoltcp::socket::tcp;
use std::io::Write;

/// One round of an exchange with its backend socket open or opening: the request out,
/// the response in. A failure before the response head is returned for a retry.
pub(super) fn forward_step(
    h: &mut Http,
    mut tls: Option<&mut ServerConnection>,
    front: &mut tcp::Socket<'static>,
    back: &mut tcp::Socket<'static>,
    front_closed: &mut bool,
    ctx: &mut Ctx<'_>,
) -> Option<Failure> {
    match back.state() {
        tcp::State::SynSent | tcp::State::SynReceived => return None,
        tcp::State::Closed | tcp::State::TimeWait if !h.resp_started => {
            return Some(
                if h.to_back_sent == 0 && back.state() == tcp::State::Closed {
                    Failure::Connect
                } else {
                    Failure::Reset
                },
            );
        }
        _ => {}
    }
    if h.fresh {
        ctx.counters.event(Event::TerminateBackendConnected);
        h.fresh = false;
    }
    // The request head, then body bytes as they come.
    while h.to_back_sent < h.to_back.len() && back.can_send() {
        match back.send_slice(&h.to_back[h.to_back_sent..]) {
            Ok(n) if n > 0 => h.to_back_sent += n,
            _ => break,
        }
    }
    if h.to_back_sent >= h.to_back.len() {
        let mut broken = false;
        while !h.req_body.is_done() && !h.inbuf.is_empty() && back.can_send() {
            let (inbuf, body) = (&h.inbuf, &mut h.req_body);
            let sent = back.send(|buf| {
                let k = buf.len().min(inbuf.len());
                match body.advance(&inbuf[..k]) {
                    Ok((n, _)) => {
                        buf[..n].copy_from_slice(&inbuf[..n]);
                        (n, n)
                    }
                    Err(_) => {
                        broken = true;
                        (0, 0)
                    }
                }
            });
            match sent {
                Ok(n) if n > 0 => {
                    if !h.mirrors.is_empty() {
                        h.mirror_body.extend_from_slice(&h.inbuf[..n]);
                        h.mirror_complete = h.req_body.is_done();
                    }
                    h.inbuf.drain(..n);
                }
                _ => break,
            }
        }
        if broken {
            // A broken chunked body: both sides reset (the stream cannot resync).
            ctx.counters.event(Event::HttpBadRequest);
            back.abort();
            front.abort();
            *front_closed = true;
            h.stage = Stage::Done;
            return None;
        }
    }
    // The response head.
    if !h.resp_started {
        let cap = h1::MAX_HEAD_LEN;
        while back.can_recv() && h.resp.len() < cap {
            let resp = &mut h.resp;
            let took = back.recv(|buf| {
                let k = buf.len().min(cap - resp.len());
                resp.extend_from_slice(&buf[..k]);
                (k, k)
            });
            if !matches!(took, Ok(n) if n > 0) {
                break;
            }
        }
        match response_head(h) {
            HeadStep::Wait => {
                // Interim answers (`100 Continue`) go out now: the client may wait for
                // them before it sends the body the final answer waits for.
                write_pending(
                    tls.as_deref_mut(),
                    front,
                    &mut h.to_client,
                    &mut h.to_client_sent,
                );
                if let Some(t) = tls.as_deref_mut() {
                    flush_tls(t, front);
                }
                if fin_received(back.state()) && !back.can_recv() {
                    return Some(Failure::Reset);
                }
                if h.resp.len() >= cap {
                    ctx.counters.event(Event::HttpBadResponse);
                    local(&mut h.to_client, 502, &[], b"", h.head_request, true);
                    back.abort();
                    h.begin_answer(502, true);
                }
                return None;
            }
            HeadStep::Bad => {
                ctx.counters.event(Event::HttpBadResponse);
                local(&mut h.to_client, 502, &[], b"", h.head_request, true);
                back.abort();
                h.begin_answer(502, true);
                return None;
            }
            HeadStep::Retry(status) => return Some(Failure::Status(status)),
            HeadStep::Started => {}
        }
    }
    // The response: its head, body bytes that came with it, then from the socket.
    write_pending(
        tls.as_deref_mut(),
        front,
        &mut h.to_client,
        &mut h.to_client_sent,
    );
    if h.to_client.is_empty() && h.status != 101 {
        let mut room = client_room(tls.as_deref(), front);
        if !h.resp.is_empty() && room > 0 {
            let k = h.resp.len().min(room);
            let saved = h.resp_body;
            if let Ok((n, _)) = h.resp_body.advance(&h.resp[..k]) {
                let w = client_write(tls.as_deref_mut(), front, &h.resp[..n]);
                if w < n {
                    h.resp_body = saved;
                    let _ = h.resp_body.advance(&h.resp[..w]);
                }
                h.resp.drain(..w);
                room = room.saturating_sub(w);
            }
        }
        while h.resp.is_empty() && !h.resp_body.is_done() && back.can_recv() && room > 0 {
            let body = &mut h.resp_body;
            let tls = &mut tls;
            let took = back.recv(|buf| {
                let k = buf.len().min(room);
                let saved = *body;
                match body.advance(&buf[..k]) {
                    Ok((n, _)) => {
                        let w = client_write(tls.as_deref_mut(), front, &buf[..n]);
                        if w < n {
                            *body = saved;
                            let _ = body.advance(&buf[..w]);
                        }
                        (w, w)
                    }
                    Err(_) => (0, 0),
                }
            });
            match took {
                Ok(n) if n > 0 => room = room.saturating_sub(n),
                _ => break,
            }
        }
        // A body framed by the connection's end ends with the backend's FIN.
        if fin_received(back.state()) && !back.can_recv() && h.resp.is_empty() {
            h.resp_body.end_of_stream();
        }
    }
    if let Some(t) = tls {
        flush_tls(t, front);
    }
    if h.status == 101 && h.to_client.is_empty() {
        h.count_response(ctx);
        h.stage = Stage::Tunnel;
        return None;
    }
    if h.resp_body.is_done() && h.to_client.is_empty() {
        // The exchange is over: the next request, or the end.
        if !h.req_body.is_done() {
            // Answered before the whole body: the stream cannot resync.
            h.close_after = true;
            h.back_reusable = false;
        }
        if !h.back_reusable || back.state() != tcp::State::Established {
            h.back_reusable = false;
            back.close();
        }
        h.count_response(ctx);
        h.stage = if h.close_after {
            Stage::Done
        } else {
            Stage::Head
        };
        h.deadline_ms = u64::MAX;
        h.resp.clear();
        h.resp_started = false;
    } else if back.state() == tcp::State::Closed
        || (fin_received(back.state())
            && !back.can_recv()
            && h.resp.is_empty()
            && !h.resp_body.is_done())
    {
        // Cut short after the head: the client is reset (nothing else can tell it).
        ctx.counters.event(Event::HttpUpstreamReset);
        back.abort();
        front.abort();
        *front_closed = true;
        h.stage = Stage::Done;
    }
    None
}

/// What reading the response head gave.
pub(super) enum HeadStep {
    /// Not complete yet.
    Wait,
    /// Broken or too large: 502.
    Bad,
    /// A 5xx the rule retries.
    Retry(u16),
    /// The final head is in `to_client`, rewritten; body bytes that came with it in
    /// `resp`.
    Started,
}

/// Parses the response head(s) in `h.resp`: interim 1xx heads pass to the client as
/// they are; the final head is rewritten into `to_client`.
pub(super) fn response_head(h: &mut Http) -> HeadStep {
    loop {
        let method = if h.head_request { "HEAD" } else { "GET" };
        let (retries, has_body, attempts) = (h.retries, h.has_body, h.attempts);
        let keep = !h.close_after && h.keep_alive;
        let mut headers = [Header {
            name: "",
            value: &[],
        }; MAX_HEADERS];
        let Http {
            resp,
            to_client,
            response_ops,
            back_reusable,
            resp_body,
            close_after,
            status: status_now,
            resp_started,
            ..
        } = &mut *h;
        let head = match h1::parse_response(resp, method, &mut headers) {
            Parse::Partial => return HeadStep::Wait,
            Parse::Error(_) => return HeadStep::Bad,
            Parse::Done(head) => head,
        };
        let status = head.status;
        let len = head.len;
        if (100..200).contains(&status) && status != 101 {
            // 100 Continue and other interim answers: passed on; the final one follows.
            let none = HeaderOps::default();
            let written = h1::append_head(to_client, len + 64, h1::MAX_HEAD_LEN + 1024, |o| {
                h1::write_response_head(o, &head, &none, false)
            });
            if written.is_none() {
                return HeadStep::Bad;
            }
            resp.drain(..len.min(resp.len()));
            continue;
        }
        let retry = match status {
            500..=599 if retries.on.server_error => true,
            502..=504 if retries.on.gateway_error => true,
            _ => false,
        };
        if retry && !has_body && attempts <= retries.attempts {
            return HeadStep::Retry(status);
        }
        let until_close = matches!(head.framing, Framing::UntilClose);
        let close = !keep || (until_close && status != 101);
        let none = HeaderOps::default();
        let ops = response_ops.as_deref().unwrap_or(&none);
        let estimate = len + h1::ops_len(ops) + 64;
        let written = h1::append_head(to_client, estimate, h1::MAX_HEAD_LEN + 4096, |o| {
            h1::write_response_head(o, &head, ops, close)
        });
        if written.is_none() {
            return HeadStep::Bad;
        }
        *back_reusable = head.keep_alive && !until_close && status != 101;
        *resp_body = Body::new(if status == 101 {
            Framing::None
        } else {
            head.framing
        });
        *close_after = close;
        *status_now = status;
        *resp_started = true;
        resp.drain(..len.min(resp.len()));
        return HeadStep::Started;
    }
}

/// `https://<host><path>[?<query>]` for an `httpsRedirect` listener (the host lower
/// case, without its port), and its length; `None` without a host.
pub(super) fn https_location(
    authority: &str,
    path: &str,
    query: &str,
) -> Option<([u8; 2048], usize)> {
    let mut host = [0u8; 256];
    let host = crate::terminate::route::host_of(authority, &mut host).filter(|h| !h.is_empty())?;
    let mut out = [0u8; 2048];
    let mut n = 0;
    let q: &[u8] = if query.is_empty() { b"" } else { b"?" };
    for part in [
        b"https://".as_slice(),
        host,
        path.as_bytes(),
        q,
        query.as_bytes(),
    ] {
        out.get_mut(n..n + part.len())?.copy_from_slice(part);
        n += part.len();
    }
    Some((out, n))
}

impl Http {
    /// Counts the response now complete: by status class, and for the rule that took
    /// the request (once; sluice's own answers before routing count only globally).
    pub(super) fn count_response(&mut self, ctx: &mut Ctx<'_>) {
        ctx.counters.event(status_class(self.status));
        if let Some(slot) = self.counter.take() {
            ctx.rules.response(slot, self.status);
        }
    }
}

/// The counter of a response's status class.
pub(super) fn status_class(status: u16) -> Event {
    match status {
        100..=199 => Event::HttpResponse1xx,
        200..=299 => Event::HttpResponse2xx,
        300..=399 => Event::HttpResponse3xx,
        400..=499 => Event::HttpResponse4xx,
        _ => Event::HttpResponse5xx,
    }
}

/// Writes sluice's own response into `out` (replacing what it held).
pub(super) fn local(
    out: &mut Vec<u8>,
    status: u16,
    extra: &[(&str, &str)],
    body: &[u8],
    head: bool,
    close: bool,
) {
    out.clear();
    out.resize(
        1024 + body.len()
            + extra
                .iter()
                .map(|(a, b)| a.len() + b.len() + 4)
                .sum::<usize>(),
        0,
    );
    let n = h1::write_local_response(out, status, extra, body, head, close).unwrap_or(0);
    out.truncate(n);
}

/// Room for plaintext towards the client: its send buffer's free space, less what TLS
/// records add (nothing while rustls still holds records to send).
pub(super) fn client_room(tls: Option<&ServerConnection>, front: &tcp::Socket<'static>) -> usize {
    let room = front.send_capacity().saturating_sub(front.send_queue());
    match tls {
        Some(t) if t.wants_write() => 0,
        Some(_) => room.saturating_sub(64 * (room / 16384 + 1)),
        None => room,
    }
}

/// Plaintext to the client (encrypted first on HTTPS); how much was taken.
pub(super) fn client_write(
    tls: Option<&mut ServerConnection>,
    front: &mut tcp::Socket<'static>,
    bytes: &[u8],
) -> usize {
    match tls {
        Some(t) => {
            let n = t.writer().write(bytes).unwrap_or(0);
            flush_tls(t, front);
            n
        }
        None => front.send_slice(bytes).unwrap_or(0),
    }
}

/// `pending[*sent..]` to the client as far as it takes; cleared once all out.
pub(super) fn write_pending(
    mut tls: Option<&mut ServerConnection>,
    front: &mut tcp::Socket<'static>,
    pending: &mut Vec<u8>,
    sent: &mut usize,
) {
    while *sent < pending.len() {
        let room = client_room(tls.as_deref(), front);
        if room == 0 {
            if let Some(t) = tls.as_deref_mut() {
                flush_tls(t, front);
                if client_room(Some(t), front) == 0 {
                    break;
                }
                continue;
            }
            break;
        }
        let end = pending.len().min(*sent + room);
        let w = client_write(tls.as_deref_mut(), front, &pending[*sent..end]);
        if w == 0 {
            break;
        }
        *sent += w;
    }
    if *sent >= pending.len() {
        pending.clear();
        *sent = 0;
    }
}
