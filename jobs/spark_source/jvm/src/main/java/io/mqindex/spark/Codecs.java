package io.mqindex.spark;

import com.github.luben.zstd.ZstdInputStream;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.zip.GZIPInputStream;
import net.jpountz.lz4.LZ4FrameInputStream;
import org.xerial.snappy.Snappy;
import org.xerial.snappy.SnappyInputStream;

/**
 * The record bytes of a compressed Kafka batch, decompressed as Kafka's clients do: gzip, snappy (Kafka's
 * xerial framing, or a raw snappy block as librdkafka may write), lz4 (the LZ4 frame format), zstd. Every
 * codec is on Spark's classpath.
 */
final class Codecs {
    private static final byte[] XERIAL = {(byte) 0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};

    private Codecs() {
    }

    /** The decompressed bytes of data[at, at + len); IOException (or a codec's runtime error) on damage. */
    static byte[] decompress(int codec, byte[] data, int at, int len) throws IOException {
        switch (codec) {
            case 1:
                return drain(new GZIPInputStream(new ByteArrayInputStream(data, at, len), 64 << 10));
            case 2:
                return snappy(data, at, len);
            case 3:
                return drain(new LZ4FrameInputStream(new ByteArrayInputStream(data, at, len)));
            case 4:
                return drain(new ZstdInputStream(new ByteArrayInputStream(data, at, len)));
            default:
                throw new IOException("unknown codec " + codec);
        }
    }

    private static byte[] snappy(byte[] data, int at, int len) throws IOException {
        if (len >= XERIAL.length && java.util.Arrays.equals(data, at, at + XERIAL.length, XERIAL, 0, XERIAL.length)) {
            return drain(new SnappyInputStream(new ByteArrayInputStream(data, at, len)));
        }
        byte[] out = new byte[Snappy.uncompressedLength(data, at, len)];
        Snappy.uncompress(data, at, len, out, 0);
        return out;
    }

    private static byte[] drain(InputStream in) throws IOException {
        try (in) {
            return in.readAllBytes();
        }
    }
}
