package io.mqindex.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;

/** An object of a file:// store: positional reads of its file. */
final class FileRanges extends Ranges {
    private final Path path;

    FileRanges(String key, String url) {
        super(key);
        this.path = Path.of(URI.create(url));
    }

    @Override
    byte[] get(long start, long end, byte[] out, int at) {
        ByteBuffer buf = ByteBuffer.wrap(out, at, Math.toIntExact(end - start));
        try (FileChannel ch = FileChannel.open(path, StandardOpenOption.READ)) {
            long pos = start;
            while (buf.hasRemaining()) {
                int n = ch.read(buf, pos);
                if (n < 0) {
                    throw Damaged.error(key, pos, "truncated object: bytes [" + start + ", " + end + ") end at " + pos);
                }
                pos += n;
            }
            counted(end - start);
        } catch (NoSuchFileException e) {
            throw Damaged.error(key, start, "missing object: no file " + path);
        } catch (IOException e) {
            throw new UncheckedIOException("mqindex: reading " + path + ": " + e.getMessage(), e);
        }
        return out;
    }
}
