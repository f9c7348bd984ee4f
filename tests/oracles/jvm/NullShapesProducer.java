import java.nio.charset.StandardCharsets;
import java.util.Properties;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;

/**
 * Produces the record shapes kafka-python refuses to write (issue 27's broker tests): a record with neither key
 * nor value, and headers whose value is null. Kafka's own producer (kafka-clients) writes them.
 *
 * <p>Usage: java -cp KAFKA_JARS:CLASSES NullShapesProducer BOOTSTRAP TOPIC CODEC FIRST_TIMESTAMP COUNT.
 * Record i (partition 0, timestamp FIRST_TIMESTAMP + 1000 i) is: i % 3 == 0 neither key nor value, with a header
 * "n" whose value is null; i % 3 == 1 key "k{i}", value null, headers "a"=null and "b"=""; i % 3 == 2 key null,
 * value "v{i}", no headers. Prints "produced COUNT" once every send is acknowledged (acks=all).
 */
public final class NullShapesProducer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        String codec = args[2];
        long first = Long.parseLong(args[3]);
        int count = Integer.parseInt(args[4]);
        Properties props = Producers.config(bootstrap, codec, 10, 2048);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < count; i++) {
                byte[] key = null;
                byte[] value = null;
                Header[] headers;
                if (i % 3 == 0) {
                    headers = new Header[] {new RecordHeader("n", (byte[]) null)};
                } else if (i % 3 == 1) {
                    key = ("k" + i).getBytes(StandardCharsets.UTF_8);
                    headers = new Header[] {new RecordHeader("a", (byte[]) null), new RecordHeader("b", new byte[0])};
                } else {
                    value = ("v" + i).getBytes(StandardCharsets.UTF_8);
                    headers = new Header[0];
                }
                producer.send(new ProducerRecord<>(topic, 0, first + 1000L * i, key, value, java.util.Arrays.asList(headers)));
            }
            producer.flush();
        }
        System.out.println("produced " + count);
    }
}
