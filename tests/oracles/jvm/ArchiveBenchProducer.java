import java.nio.charset.StandardCharsets;
import java.util.Properties;
import java.util.SplittableRandom;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.internals.RecordHeaders;

/**
 * The cluster side of the archive benchmark (benchmarks/archive_bench.py): kafka-clients' producer fills a topic
 * with records shaped as production events are, fast enough for a gigabyte. Record i: key "user-{u}" (u drawn from
 * 50,000 users), a JSON value of VALUE_BYTES (event fields, then a text of words drawn from a small vocabulary, so
 * that it compresses as event payloads do, about 2-3x), one header "trace-id" (16 hex digits), timestamp
 * START + i * SPAN / COUNT; Kafka's default partitioner (murmur2 of the key). Seeded: the same arguments give the
 * same records.
 *
 * <p>Usage: java -cp KAFKA_JARS:CLASSES ArchiveBenchProducer BOOTSTRAP TOPIC CODEC COUNT VALUE_BYTES START SPAN.
 * Prints "records COUNT ms ELAPSED bytes VALUE_AND_KEY_BYTES" once every send is acknowledged (acks=all,
 * idempotent, linger 5 ms, 64 KiB batches).
 */
public final class ArchiveBenchProducer {
    private static final String[] WORDS = {
        "order", "placed", "shipped", "cart", "item", "price", "EUR", "USD", "warehouse", "berlin", "paris",
        "delivered", "returned", "customer", "session", "click", "view", "search", "mobile", "desktop", "promo",
        "discount", "quantity", "sku", "payment", "card", "invoice", "tax", "region", "eu-west-1", "status", "ok",
        "retry", "latency", "ms", "checkout", "address", "street", "city", "zip", "country", "DE", "FR", "NL",
        "label", "category", "books", "garden", "kitchen", "toys", "shoes", "electronics", "gift", "wrap",
    };

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String codec = args[2];
        int count = Integer.parseInt(args[3]);
        int valueBytes = Integer.parseInt(args[4]);
        long start = Long.parseLong(args[5]);
        long span = Long.parseLong(args[6]);
        Properties props = Producers.config(bootstrap, codec, 5, 64 << 10);
        SplittableRandom random = new SplittableRandom(30);
        long bytes = 0;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            long began = System.nanoTime();
            StringBuilder text = new StringBuilder(valueBytes + 64);
            for (int i = 0; i < count; i++) {
                int user = random.nextInt(50_000);
                long timestamp = start + (long) ((double) i * span / count);
                text.setLength(0);
                text.append("{\"event_id\":").append(i).append(",\"user\":\"user-").append(user)
                    .append("\",\"type\":\"").append(WORDS[random.nextInt(WORDS.length)])
                    .append("\",\"amount\":").append(random.nextInt(100_000) / 100.0)
                    .append(",\"ts\":").append(timestamp).append(",\"note\":\"");
                while (text.length() < valueBytes - 2) {
                    text.append(WORDS[random.nextInt(WORDS.length)]).append(' ');
                }
                text.setLength(valueBytes - 2);
                text.append("\"}");
                byte[] key = ("user-" + user).getBytes(StandardCharsets.US_ASCII);
                byte[] value = text.toString().getBytes(StandardCharsets.US_ASCII);
                RecordHeaders headers = new RecordHeaders();
                headers.add("trace-id", String.format("%016x", random.nextLong()).getBytes(StandardCharsets.US_ASCII));
                bytes += key.length + value.length;
                producer.send(new ProducerRecord<>(topic, null, timestamp, key, value, headers));
            }
            producer.flush();
            long elapsed = (System.nanoTime() - began) / 1_000_000;
            System.out.println("records " + count + " ms " + elapsed + " bytes " + bytes);
        }
    }
}
