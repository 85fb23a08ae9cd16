use super::*;

/// A command line's buffer serves the next line, unless a long line grew it past
/// `SPARE_LIMIT`: then it is let go, and an idle session holds no more than before.
#[tokio::test]
async fn a_line_buffer_is_reused_unless_a_long_line_grew_it() {
    let (mut client, server) = tokio::io::duplex(1 << 16);
    let mut conn = Conn::new(Box::new(server), Duration::from_secs(5), 4096);
    let (_trigger, mut shutdown) = crate::state::shutdown::channel();
    let long = format!("NOOP {}\r\n", "x".repeat(1000));
    let input = format!("NOOP\r\nRSET\r\n{long}");
    client.write_all(input.as_bytes()).await.unwrap();
    async fn next(conn: &mut Conn, shutdown: &mut Shutdown) -> Vec<u8> {
        match conn.read_line(shutdown).await {
            Ok(Line::Command(line)) => line,
            other => panic!("{other:?}"),
        }
    }
    let first = next(&mut conn, &mut shutdown).await;
    let buffer = first.as_ptr();
    conn.recycle(first);
    assert_eq!(conn.spare.as_ptr(), buffer, "kept for the next line");
    let second = next(&mut conn, &mut shutdown).await;
    assert_eq!(second, b"RSET\r\n");
    assert_eq!(second.as_ptr(), buffer, "the same buffer");
    conn.recycle(second);
    let third = next(&mut conn, &mut shutdown).await;
    assert_eq!(third, long.as_bytes());
    conn.recycle(third);
    assert_eq!(conn.spare.capacity(), 0, "a grown buffer is not kept");
}

/// A session that waits (idle, or queued after its message) holds a command-sized input
/// buffer, whatever it read before: thousands of them at once must stay cheap.
#[tokio::test]
async fn the_input_buffer_stays_small_between_commands_and_after_data() {
    let (client, server) = tokio::io::duplex(1 << 20);
    let mut conn = Conn::new(Box::new(server), Duration::from_secs(5), 4096);
    let (_trigger, mut shutdown) = crate::state::shutdown::channel();
    let mut client = client;
    client.write_all(b"EHLO x\r\nDATA\r\n").await.unwrap();
    assert!(matches!(
        conn.read_line(&mut shutdown).await,
        Ok(Line::Command(_))
    ));
    assert!(conn.input.capacity() <= 2 * COMMAND_READ);
    assert!(matches!(
        conn.read_line(&mut shutdown).await,
        Ok(Line::Command(_))
    ));
    // A small message: the buffer grew for its read, and went back after it.
    client
        .write_all(b"Subject: s\r\n\r\nhi\r\n.\r\n")
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut reader = DataReader::new(1 << 20, 4096);
    conn.read_data(&mut reader, deadline).await.unwrap();
    assert!(conn.input.capacity() <= 2 * COMMAND_READ);
    // A big one grows the buffer for its reads, and gives the room back at its end,
    // keeping what was pipelined behind the dot.
    let line = [b'x'; 998];
    let writer = tokio::spawn(async move {
        for _ in 0..200 {
            client.write_all(&line).await.unwrap();
            client.write_all(b"\r\n").await.unwrap();
        }
        client.write_all(b".\r\nQUIT\r\n").await.unwrap();
        client
    });
    let mut reader = DataReader::new(1 << 20, 4096);
    conn.read_data(&mut reader, deadline).await.unwrap();
    assert_eq!(reader.len(), 200 * 1000);
    assert!(conn.input.capacity() <= 2 * COMMAND_READ);
    let line = conn.read_line(&mut shutdown).await.unwrap();
    assert_eq!(line, Line::Command(b"QUIT\r\n".to_vec()));
    drop(writer.await.unwrap());
}
