import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * The ingest side of the Kafka benchmark (benchmarks/kafka_bench.py): kafka-clients' producer writes the records
 * benchmarks/append_bench.py generates for klake's append, into a topic of the broker, partitioned by Kafka's
 * default partitioner (murmur2 of the key, as klake's append assigns them). Record i: key "k{i % 100000}", value
 * "{i}" padded with 'x' to VALUE_BYTES, timestamp START + i * DAY / COUNT.
 *
 * <p>Usage: java -cp KAFKA_JARS:CLASSES BenchProducer BOOTSTRAP TOPIC CODEC COUNT VALUE_BYTES START DAY BATCH_BYTES.
 * Prints "records COUNT ms ELAPSED" once every send is acknowledged (acks=all, idempotent, as the producer's
 * defaults are); ELAPSED runs from the first send to the last acknowledgement (the JVM's start is not in it).
 */
public final class BenchProducer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String codec = args[2];
        int count = Integer.parseInt(args[3]);
        int valueBytes = Integer.parseInt(args[4]);
        long start = Long.parseLong(args[5]);
        long day = Long.parseLong(args[6]);
        int batchBytes = Integer.parseInt(args[7]);
        Properties props = Producers.config(bootstrap, codec, 5, batchBytes);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            long began = System.nanoTime();
            for (int i = 0; i < count; i++) {
                byte[] id = Integer.toString(i).getBytes(StandardCharsets.US_ASCII);
                byte[] value = Arrays.copyOf(id, valueBytes);
                Arrays.fill(value, id.length, valueBytes, (byte) 'x');
                byte[] key = ("k" + (i % 100000)).getBytes(StandardCharsets.US_ASCII);
                long timestamp = start + (long) ((double) i * day / count);
                producer.send(new ProducerRecord<>(topic, null, timestamp, key, value));
            }
            producer.flush();
            long elapsed = (System.nanoTime() - began) / 1_000_000;
            System.out.println("records " + count + " ms " + elapsed);
        }
    }
}
