package klake;

import org.apache.spark.sql.api.java.UDF2;

/**
 * Kafka's default partitioner for a keyed record, as a Spark SQL function (klake's append job): the
 * partition of {@code key} among {@code numPartitions} is {@code Utils.toPositive(Utils.murmur2(key)) %
 * numPartitions} (kafka-clients' {@code BuiltInPartitioner.partitionForKey}); null for a null key, which
 * Kafka sends through the sticky partitioner instead (KIP-480; the append job's Python pass).
 */
public final class KafkaPartition implements UDF2<byte[], Integer, Integer> {
    private static final long serialVersionUID = 1L;

    @Override
    public Integer call(byte[] key, Integer numPartitions) {
        if (key == null) {
            return null;
        }
        return (murmur2(key) & 0x7fffffff) % numPartitions;
    }

    /** kafka-clients' {@code Utils.murmur2}: seed 0x9747b28c, m 0x5bd1e995, r 24, Java's wrapping int. */
    static int murmur2(byte[] data) {
        final int length = data.length;
        final int m = 0x5bd1e995;
        final int r = 24;
        int h = 0x9747b28c ^ length;
        final int words = length / 4;
        for (int i = 0; i < words; i++) {
            final int at = i * 4;
            int k = (data[at] & 0xff) + ((data[at + 1] & 0xff) << 8) + ((data[at + 2] & 0xff) << 16)
                    + ((data[at + 3] & 0xff) << 24);
            k *= m;
            k ^= k >>> r;
            k *= m;
            h *= m;
            h ^= k;
        }
        final int tail = length & ~3;
        switch (length % 4) {
            case 3:
                h ^= (data[tail + 2] & 0xff) << 16;
            // fall through
            case 2:
                h ^= (data[tail + 1] & 0xff) << 8;
            // fall through
            case 1:
                h ^= data[tail] & 0xff;
                h *= m;
            default:
        }
        h ^= h >>> 13;
        h *= m;
        h ^= h >>> 15;
        return h;
    }
}
