//! `rpcrdma-dump`: print an RPC-over-RDMA transport header (or RFC 8797 CM Private
//! Data) as one JSON object, or turn that JSON back into bytes with `--encode`.
//!
//! The conversion lives in `rpcrdma_apps::dump`; this file only does I/O and exit
//! codes: 0 on success, 1 on bad input (one line on stderr, nothing on stdout),
//! 2 on a usage error (clap).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Parser;
use rpcrdma_apps::dump;

const LONG_ABOUT: &str = "\
Reads one RPC-over-RDMA transport header (version 1, RFC 8166, or version 2, \
draft-cel-nfsv4-rpcrdma-version-two-09) and whatever follows it, from FILE or stdin, \
and prints it as one JSON object on stdout.

Fields (fixed names):
  always              version, xid, credits, type (RDMA_MSG, RDMA_NOMSG, RDMA_MSGP,
                      RDMA_DONE, RDMA_ERROR, RDMA2_MSG, RDMA2_NOMSG, RDMA2_ERROR,
                      RDMA2_CONNPROP); version 2 adds flags
  MSG, NOMSG, MSGP    reads: [{position, handle, length, offset}] (flat, wire order)
                      writes: [[{handle, length, offset}]] (one list per chunk)
                      reply: null or [{handle, length, offset}]
                      version 2 adds inv_handle; MSGP adds align, thresh
  MSG, MSGP           payload_offset, payload_length (bytes), and payload: the inline
                      RPC message in lowercase hex, so that --encode is byte-exact
  RDMA_ERROR,         error: {code, name, ...}: the error's arguments sit inside the
  RDMA2_ERROR         error object next to code and name: vers_low and vers_high
                      (ERR_VERS, RDMA2_ERR_VERS), max_chunks (RDMA2_ERR_READ_CHUNKS,
                      RDMA2_ERR_WRITE_CHUNKS), max_segments (RDMA2_ERR_SEGMENTS),
                      chunk_index and length_needed (RDMA2_ERR_WRITE_RESOURCE),
                      length_needed (RDMA2_ERR_REPLY_RESOURCE); name is null for an
                      unknown version 2 code
  RDMA2_CONNPROP      properties: [{id, name, value, data}]: name RBSIZ, BRS or null;
                      value the decoded number or null; data lowercase hex
  other types         trailing: hex of bytes after the header, only when there are any

With --private-data the input is RDMA-CM Private Data (RFC 8797), searched for the \
format identifier at any offset, and the output is {present, offset, version, \
remote_invalidation, send_size, receive_size} (sizes in bytes; the section 5.1 \
defaults when absent).

With --encode the input is that JSON (the tool's own output, possibly edited) and the \
output is the bytes, so `rpcrdma-dump x.bin | rpcrdma-dump --encode | cmp - x.bin` \
holds. Fields a header type does not have are refused; payload_offset and \
payload_length, if given, must agree with the encoding. With --private-data, \
present: false encodes to nothing and sizes must be multiples of 1024 in 1024..=262144.

Exit status: 0 on success; 1 on malformed input, with one line on stderr naming the \
field and byte offset and nothing on stdout; 2 on a usage error.";

#[derive(Debug, Parser)]
#[command(
    name = "rpcrdma-dump",
    version,
    about = "Print an RPC-over-RDMA transport header or RFC 8797 private data as JSON (or encode it back)",
    long_about = LONG_ABOUT
)]
struct Cli {
    /// Input file; stdin when absent or "-".
    file: Option<PathBuf>,
    /// Input bytes are hex text (whitespace and newlines ignored, optional 0x); with
    /// --encode, write hex instead of binary.
    #[arg(long)]
    hex: bool,
    /// Decode (or with --encode, encode) RFC 8797 CM Private Data instead of a
    /// transport header.
    #[arg(long)]
    private_data: bool,
    /// Read the JSON form and write the bytes.
    #[arg(long)]
    encode: bool,
    /// Print the JSON on one line.
    #[arg(long)]
    compact: bool,
}

fn read_input(file: Option<&PathBuf>) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    match file {
        Some(p) if p.as_os_str() != "-" => {
            buf = std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?;
        }
        _ => {
            std::io::stdin()
                .lock()
                .read_to_end(&mut buf)
                .context("cannot read stdin")?;
        }
    }
    Ok(buf)
}

/// Everything the tool writes to stdout, computed before anything is written so
/// that a failure leaves stdout empty.
fn run(cli: &Cli) -> Result<Vec<u8>> {
    let input = read_input(cli.file.as_ref())?;
    if cli.encode {
        let bytes = if cli.private_data {
            dump::encode_private_data(&dump::parse_private_data_json(&input)?)?
        } else {
            dump::encode_header(&dump::parse_header_json(&input)?)?
        };
        return Ok(if cli.hex {
            let mut s = dump::to_hex(&bytes);
            s.push('\n');
            s.into_bytes()
        } else {
            bytes
        });
    }
    let bytes = if cli.hex {
        dump::parse_hex(&input).context("hex input")?
    } else {
        input
    };
    let mut text = if cli.private_data {
        dump::render(&dump::decode_private_data(&bytes), cli.compact)?
    } else {
        dump::render(&dump::decode_header(&bytes)?, cli.compact)?
    };
    text.push('\n');
    Ok(text.into_bytes())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = run(&cli).and_then(|out| {
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(&out).context("cannot write stdout")?;
        stdout.flush().context("cannot write stdout")
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Exactly one line: the chain of causes joined by ": ".
            let msg = format!("{e:#}").replace(['\n', '\r'], " ");
            eprintln!("rpcrdma-dump: {msg}");
            ExitCode::from(1)
        }
    }
}
