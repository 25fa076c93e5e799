//! `delegate_async_io!`: tokio's `AsyncRead` and `AsyncWrite` for an enum whose every variant
//! holds one stream, by delegating to it. The load generator's TCP-or-TLS stream and the
//! forwarder's TCP-or-Unix app connection are such enums; without this each wrote the same
//! four methods out.
//!
//! Owns: that delegation. Must not touch: what the streams are.

/// Implements `AsyncRead` and `AsyncWrite` for `Enum { Variant, … }`, each variant a tuple
/// of one stream (a `Box` of one is a stream too).
macro_rules! delegate_async_io {
    ($enum:ident { $($variant:ident),+ $(,)? }) => {
        impl tokio::io::AsyncRead for $enum {
            fn poll_read(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                match self.get_mut() {
                    $($enum::$variant(s) => tokio::io::AsyncRead::poll_read(std::pin::Pin::new(s), cx, buf),)+
                }
            }
        }

        impl tokio::io::AsyncWrite for $enum {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                match self.get_mut() {
                    $($enum::$variant(s) => tokio::io::AsyncWrite::poll_write(std::pin::Pin::new(s), cx, buf),)+
                }
            }

            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                match self.get_mut() {
                    $($enum::$variant(s) => tokio::io::AsyncWrite::poll_flush(std::pin::Pin::new(s), cx),)+
                }
            }

            fn poll_shutdown(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                match self.get_mut() {
                    $($enum::$variant(s) => tokio::io::AsyncWrite::poll_shutdown(std::pin::Pin::new(s), cx),)+
                }
            }
        }
    };
}

pub(crate) use delegate_async_io;
