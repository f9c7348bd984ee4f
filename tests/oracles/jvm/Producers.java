import java.util.Properties;

import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The producer configuration the Java helpers share (BenchProducer, ArchiveBenchProducer, NullShapesProducer):
 * kafka-clients' producer of byte arrays to BOOTSTRAP, compressing with CODEC, acks=all (idempotent, as the
 * producer's defaults are), batches of LINGER_MS and BATCH_BYTES, and a 64 MiB buffer within the helper JVM's
 * 256 MiB heap. Compiled beside each helper (`run_java_helper` passes this directory as javac's -sourcepath).
 */
final class Producers {
    private Producers() {
    }

    static Properties config(String bootstrap, String codec, int lingerMs, int batchBytes) {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.LINGER_MS_CONFIG, Integer.toString(lingerMs));
        props.put(ProducerConfig.BATCH_SIZE_CONFIG, Integer.toString(batchBytes));
        props.put(ProducerConfig.BUFFER_MEMORY_CONFIG, Long.toString(64L << 20));
        return props;
    }
}
